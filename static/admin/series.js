// The "Last 5 minutes" panel: purchases by outcome (refusals by rule, and what the shadow
// rules would have refused), stock per item and the limiter's refusals, one point a
// second, drawn by charts.js. Stock is drawn as a share of each item's total, so a
// 20-unit item and a million-unit one read on one axis, for the items picked (by default
// those on sale now).
import { byId, el } from '../dom.js';
import { formatNumber, formatTime } from '../format.js';
import { Outcome } from '../words.js';
import { renderLineChart } from './charts.js';
import { itemList, itemOf } from './items.js';
import { loadPanel } from './session.js';

const WINDOW_S = 300;

const ui = {
  updated: byId('charts-updated'),
  error: byId('charts-error'),
  purchases: byId('chart-purchases'),
  stock: byId('chart-stock'),
  refusals: byId('chart-refusals'),
  pickerSummary: byId('stock-picker-summary'),
  pickerList: byId('stock-picker-list'),
  pickerDefault: byId('stock-picker-default'),
};

const points = (values) => (Array.isArray(values) ? values.map((v) => (v === null ? null : Number(v) || 0)) : []);

/** A chart line of an outcome: keyed and labelled by its word. */
const outcomeLine = (outcome, values, tone) => ({ key: outcome.word, label: outcome.label, values: points(values), tone });

// --- the item picker of the stock chart ---------------------------------------------------

/** The ids the operator picked, or null: the items on sale now. */
let picked = null;
/** id → its checkbox's <li>, kept across redraws (focus stays). */
const choices = new Map();
/** The last answer's stock lines, to redraw at once when the pick changes. */
let lastSeries = null;

/** On sale now: started, not ended, not archived (paused and sold-out ones count). */
function onSaleNow(item, now = Date.now()) {
  return !item.archivedAt && Date.parse(item.startsAt) <= now && Date.parse(item.endsAt) > now;
}

function shownIds(candidates) {
  if (picked !== null) return new Set(candidates.filter((id) => picked.has(id)));
  return new Set(candidates.filter((id) => onSaleNow(itemOf(id))));
}

/** The picker lists every item of the table that has a stock line, newest first. */
function fillPicker(candidates, shown) {
  const wanted = new Set(candidates);
  for (const [id, li] of choices) {
    if (!wanted.has(id)) {
      li.remove();
      choices.delete(id);
    }
  }
  candidates.forEach((id, index) => {
    let li = choices.get(id);
    const item = itemOf(id);
    if (!li) {
      const box = el('input', {
        type: 'checkbox',
        id: `stock-pick-${id}`,
        value: String(id),
        onchange: () => {
          picked = new Set(
            [...ui.pickerList.querySelectorAll('input:checked')].map((input) => Number(input.value)),
          );
          if (lastSeries) drawStock(lastSeries);
        },
      });
      li = el('li', { class: 'checkbox-field' }, box, el('label', { for: box.id }));
      choices.set(id, li);
    }
    li.querySelector('label').textContent = `#${id} ${item.name}`;
    li.querySelector('input').checked = shown.has(id);
    if (ui.pickerList.children[index] !== li) ui.pickerList.insertBefore(li, ui.pickerList.children[index] || null);
  });
  ui.pickerSummary.textContent =
    `Items: ${formatNumber(shown.size)} of ${formatNumber(candidates.length)} shown` +
    (picked === null ? ' (on sale now)' : '');
}

/** Remaining stock ÷ the item's total, in percent (one decimal). */
const share = (values, total) => values.map((v) => (v === null ? null : Math.round((v / total) * 1000) / 10));

function drawStock(s) {
  const stock = s.stock || {};
  const candidates = itemList()
    .filter((item) => Number(item.totalStock) > 0 && Object.hasOwn(stock, String(item.id)))
    .map((item) => item.id);
  const shown = shownIds(candidates);
  fillPicker(candidates, shown);
  renderLineChart(ui.stock, {
    name: 'stock',
    kind: 'level',
    title: 'Stock left as a share of each item’s total (latest)',
    from: s.from,
    max: 100,
    unit: '%',
    lines: candidates
      .filter((id) => shown.has(id))
      .map((id) => {
        const item = itemOf(id);
        return { key: `item:${id}`, label: `#${id} ${item.name}`, values: share(points(stock[id]), Number(item.totalStock)) };
      }),
  });
}

ui.pickerDefault.addEventListener('click', () => {
  picked = null;
  if (lastSeries) drawStock(lastSeries);
});

// --- the panel ---------------------------------------------------------------------------

export async function loadSeries() {
  const s = await loadPanel(`/admin/api/stats/series?window=${WINDOW_S}`, ui.error, 'the charts');
  if (!s) return;
  const p = s.purchases || {};
  const rejected = p.rejected || {};
  const shadow = p.shadowRefused || {};
  renderLineChart(ui.purchases, {
    name: 'purchases',
    title: 'Purchases per second by outcome, last 5 minutes (totals)',
    from: s.from,
    lines: [
      outcomeLine(Outcome.CREATED, p.created, 'created'),
      outcomeLine(Outcome.SOLD_OUT, p.soldOut, 'sold-out'),
      ...Object.keys(rejected).map((d) => ({ key: `rejected:${d}`, label: `Rejected: ${d}`, values: points(rejected[d]) })),
      // What the sale's shadow rules would have refused: dashed, beside what was refused.
      ...Object.keys(shadow).map((rule) => ({
        key: `shadow:${rule}`,
        label: `Would refuse: ${rule}`,
        values: points(shadow[rule]),
        dashed: true,
      })),
      { key: 'errors', label: 'Errors', values: points(p.errors), tone: 'errors' },
      { key: 'other', label: 'Other', values: points(p.other), tone: 'other' },
    ],
  });
  lastSeries = s;
  drawStock(s);
  const r = s.refusals || {};
  renderLineChart(ui.refusals, {
    name: 'refusals',
    title: 'Limiter refusals per second, last 5 minutes (totals)',
    from: s.from,
    lines: [
      { key: 'refused_locally', label: 'Answered locally', values: points(r.local), tone: 'local' },
      { key: 'refused_by_redis', label: 'Answered by Redis', values: points(r.redis), tone: 'redis' },
    ],
  });
  ui.updated.textContent = `Updated ${formatTime(new Date())}`;
}
