// The live-traffic panel over the last minute: the tiles (purchases the limiter let
// through, each counted once; orders; sold-out and already-purchased answers; refusals,
// per dimension; errors; fail-open events) and the limiter's decisions per dimension.
import { byId, el } from '../dom.js';
import { formatNumber, formatTime } from '../format.js';
import { loadPanel } from './session.js';

const WINDOW_S = 60;
/** The limiter's dimensions, listed even before they decide anything. */
const DIMENSIONS = ['api', 'user', 'ip'];

const ui = {
  updated: byId('stats-updated'),
  error: byId('stats-error'),
  admitted: byId('stat-admitted'),
  orders: byId('stat-orders'),
  soldOut: byId('stat-sold-out'),
  alreadyPurchased: byId('stat-already-purchased'),
  refused: byId('stat-refused'),
  refusedDetail: byId('stat-refused-detail'),
  errors: byId('stat-errors'),
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

/** A count of the answer, or a dash when this server does not give it. */
const count = (value) => (value === undefined || value === null ? '–' : formatNumber(value));

export async function loadStats() {
  const s = await loadPanel(`/admin/api/stats?window=${WINDOW_S}`, ui.error, 'the live counters');
  if (!s) return;
  const passes = s.passes || {};
  const rejections = s.rejections || {};
  const dims = [...new Set([...DIMENSIONS, ...Object.keys(passes), ...Object.keys(rejections)])];
  const refused = Object.values(rejections).reduce((a, b) => a + (Number(b) || 0), 0);
  ui.admitted.textContent = count(s.admitted);
  ui.orders.textContent = count(s.orders);
  ui.soldOut.textContent = count(s.soldOut);
  ui.alreadyPurchased.textContent = count(s.alreadyPurchased);
  ui.refused.textContent = formatNumber(refused);
  ui.refusedDetail.textContent = dims.map((d) => `${d} ${formatNumber(rejections[d])}`).join(' · ');
  ui.errors.textContent = count(s.errors);
  ui.errors.classList.toggle('alarm', Number(s.errors) > 0);
  ui.failOpen.textContent = count(s.failOpen);
  ui.failOpen.classList.toggle('alarm', Number(s.failOpen) > 0);
  ui.dimensionRows.replaceChildren(
    ...dims.map((d) => dimensionRow(d, Number(passes[d]) || 0, Number(rejections[d]) || 0)),
  );
  ui.updated.textContent = `Updated ${formatTime(new Date())}`;
}
