// The "Last 5 minutes" panel: purchases by outcome, stock per item and the limiter's
// refusals, one point a second, drawn by charts.js.
import { byId } from '../dom.js';
import { formatTime } from '../format.js';
import { Outcome } from '../words.js';
import { renderLineChart } from './charts.js';
import { itemName } from './items.js';
import { loadPanel } from './session.js';

const WINDOW_S = 300;

const ui = {
  updated: byId('charts-updated'),
  error: byId('charts-error'),
  purchases: byId('chart-purchases'),
  stock: byId('chart-stock'),
  refusals: byId('chart-refusals'),
};

const points = (values) => (Array.isArray(values) ? values.map((v) => (v === null ? null : Number(v) || 0)) : []);

/** A chart line of an outcome: keyed and labelled by its word. */
const outcomeLine = (outcome, values, tone) => ({ key: outcome.word, label: outcome.label, values: points(values), tone });

export async function loadSeries() {
  const s = await loadPanel(`/admin/api/stats/series?window=${WINDOW_S}`, ui.error, 'the charts');
  if (!s) return;
  const p = s.purchases || {};
  const rejected = p.rejected || {};
  renderLineChart(ui.purchases, {
    name: 'purchases',
    title: 'Purchases per second by outcome, last 5 minutes (totals)',
    from: s.from,
    lines: [
      outcomeLine(Outcome.CREATED, p.created, 'created'),
      outcomeLine(Outcome.SOLD_OUT, p.soldOut, 'sold-out'),
      ...Object.keys(rejected).map((d) => ({ key: `rejected:${d}`, label: `Rejected: ${d}`, values: points(rejected[d]) })),
      { key: 'errors', label: 'Errors', values: points(p.errors), tone: 'errors' },
      { key: 'other', label: 'Other', values: points(p.other), tone: 'other' },
    ],
  });
  const stock = s.stock || {};
  renderLineChart(ui.stock, {
    name: 'stock',
    kind: 'level',
    title: 'Stock remaining per item (latest)',
    from: s.from,
    lines: Object.keys(stock).map((id) => {
      const name = itemName(id);
      return { key: `item:${id}`, label: name === undefined ? `Item #${id}` : `#${id} ${name}`, values: points(stock[id]) };
    }),
  });
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
