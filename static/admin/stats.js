// The live-traffic panel: the tiles (orders, passes, rejections, fail-open events) and
// the limiter's decisions per dimension over the last minute. Its answer also carries
// the items and their orders by state, which it hands to the items table.
import { byId, el } from '../dom.js';
import { formatNumber, formatTime } from '../format.js';
import { showItems } from './items.js';
import { loadPanel } from './session.js';

const WINDOW_S = 60;
/** The limiter's dimensions, listed even before they decide anything. */
const DIMENSIONS = ['api', 'user', 'ip'];

const ui = {
  updated: byId('stats-updated'),
  error: byId('stats-error'),
  orders: byId('stat-orders'),
  passes: byId('stat-passes'),
  rejections: byId('stat-rejections'),
  failOpen: byId('stat-fail-open'),
  dimensionRows: byId('dimension-rows'),
};

function dimensionRow(dimension, passes, rejections) {
  const total = passes + rejections;
  const share = total > 0 ? Math.round((rejections / total) * 100) : 0;
  const meter = el('meter', { min: 0, max: 100, value: share, class: 'share', 'aria-hidden': 'true' });
  return el(
    'tr',
    { dataset: { dimension } },
    el('th', { scope: 'row', text: dimension }),
    el('td', { class: 'num', text: formatNumber(passes) }),
    el('td', { class: 'num', text: formatNumber(rejections) }),
    el('td', { class: 'bar-col' }, meter, el('span', { class: 'share-text', text: `${share}%` })),
  );
}

export async function loadStats() {
  const s = await loadPanel(`/admin/api/stats?window=${WINDOW_S}`, ui.error, 'the live counters');
  if (!s) return;
  const passes = s.passes || {};
  const rejections = s.rejections || {};
  const dims = [...new Set([...DIMENSIONS, ...Object.keys(passes), ...Object.keys(rejections)])];
  const sum = (o) => Object.values(o).reduce((a, b) => a + (Number(b) || 0), 0);
  ui.orders.textContent = formatNumber(s.orders);
  ui.passes.textContent = formatNumber(sum(passes));
  ui.rejections.textContent = formatNumber(sum(rejections));
  ui.failOpen.textContent = formatNumber(s.failOpen);
  ui.failOpen.classList.toggle('alarm', Number(s.failOpen) > 0);
  ui.dimensionRows.replaceChildren(
    ...dims.map((d) => dimensionRow(d, Number(passes[d]) || 0, Number(rejections[d]) || 0)),
  );
  showItems(Array.isArray(s.items) ? s.items : [], s.ordersByState || {});
  ui.updated.textContent = `Updated ${formatTime(new Date())}`;
}
