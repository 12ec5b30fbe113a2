// The report page of one sale (/admin/report.html?item=ID, linked from each item of the
// dashboard's items table): GET /admin/api/items/{id}/report drawn as figures, a
// minute-by-minute chart (charts.js), its offenders and its waits, with the minutes as
// CSV and the whole report as JSON to download. Signs in like the dashboard (signin.js).
import { announce, byId, el } from '../dom.js';
import { formatDateRange, formatDateTime, formatDuration, formatNumber } from '../format.js';
import { OrderState } from '../words.js';
import { renderLineChart } from './charts.js';
import { adminDownload, loadPanel, saveFile, signedIn, whenSessionLost } from './session.js';
import { signOut, startSignIn } from './signin.js';

const ui = {
  title: byId('report-title'),
  window: byId('report-window'),
  error: byId('report-error'),
  body: byId('report-body'),
  csv: byId('report-csv'),
  json: byId('report-json'),
  refresh: byId('report-refresh'),
  exported: byId('report-exported'),
  chart: byId('chart-report'),
  minutesEmpty: byId('minutes-empty'),
  offenders: byId('offender-rows'),
  offendersEmpty: byId('offenders-empty'),
  waits: byId('wait-rows'),
  waitsEmpty: byId('waits-empty'),
};

const figure = (id, value) => {
  byId(id).textContent = value;
};

/** The item of the page's query, or null when it names none. */
function itemOfPage() {
  const raw = new URLSearchParams(window.location.search).get('item');
  return raw && /^[1-9][0-9]{0,17}$/.test(raw) ? raw : null;
}

/** "over 2 s, up to 5 s" for a wait bucket. */
function waitText(bucket) {
  if (!bucket) return '–';
  const s = (secs) => formatDuration(secs * 1000);
  if (bucket.upToSecs === null || bucket.upToSecs === undefined) return `over ${s(bucket.overSecs)}`;
  return bucket.overSecs === 0 ? `up to ${s(bucket.upToSecs)}` : `${s(bucket.overSecs)} – ${s(bucket.upToSecs)}`;
}

function drawSummary(r) {
  ui.title.textContent = `Sale report: #${r.item.id} ${r.item.name}`;
  document.title = `Report #${r.item.id} ${r.item.name} · Seckill`;
  ui.window.textContent = `On sale ${formatDateRange(r.item.startsAt, r.item.endsAt)}`;
  figure('report-joined', formatNumber(r.queue.joined));
  figure('report-admitted', formatNumber(r.queue.admitted));
  figure('report-abandoned', `given a pass to buy; ${formatNumber(r.queue.abandoned)} left the queue or let their pass expire`);
  figure('report-bought', formatNumber(r.orders.bought));
  figure('report-units', `of ${formatNumber(r.item.totalStock)} units; ${formatNumber(r.item.unitsLeft)} left now`);
  for (const [key, state, field] of [
    ['paid', OrderState.PAID, 'paid'],
    ['cancelled', OrderState.CANCELLED, 'cancelled'],
    ['expired', OrderState.EXPIRED, 'expired'],
    ['pending', OrderState.PENDING_PAYMENT, 'pendingPayment'],
  ]) {
    figure(`report-${key}-label`, state.label);
    figure(`report-${key}`, formatNumber(r.orders[field]));
  }
  figure('report-attempts', formatNumber(r.attempts));
  const refused = Object.entries(r.refused || {});
  figure('report-refused', formatNumber(refused.reduce((sum, [, n]) => sum + n, 0)));
  figure('report-refused-detail', refused.map(([dimension, n]) => `${dimension}: ${formatNumber(n)}`).join(' · ') || 'none');
  figure('report-errors', formatNumber(r.errors));
  figure('report-peak', r.peak ? `${formatNumber(r.peak.orders)} / min` : '–');
  figure('report-peak-at', r.peak ? `orders, in the minute from ${formatDateTime(r.peak.minute)}` : 'no order');
  figure('report-sold-out', r.soldOut ? formatDuration(r.soldOut.secondsFromStart * 1000) : 'not sold out');
  figure('report-sold-out-at', r.soldOut ? `last unit ordered ${formatDateTime(r.soldOut.at)}` : '');
  figure('report-wait-median', waitText(r.waits.median));
  figure('report-wait-p95', waitText(r.waits.p95));
}

function drawMinutes(r) {
  const minutes = r.minutes || [];
  ui.minutesEmpty.hidden = minutes.length > 0;
  if (!minutes.length) {
    ui.chart.replaceChildren();
    return;
  }
  const column = (pick) => minutes.map(pick);
  renderLineChart(ui.chart, {
    name: 'report',
    title: 'Per minute over the sale (totals)',
    from: Date.parse(minutes[0].minute) / 1000,
    step: 60,
    clock: true,
    per: 'minute',
    lines: [
      { key: 'attempts', label: 'Attempts', values: column((m) => m.attempts), tone: 'other' },
      { key: 'admitted', label: 'Admitted', values: column((m) => m.admitted) },
      ...Object.keys(r.refused || {}).map((d) => ({
        key: `rejected:${d}`,
        label: `Refused: ${d}`,
        values: column((m) => m.refused[d] || 0),
      })),
      { key: 'sold', label: 'Sold (orders)', values: column((m) => m.sold), tone: 'created' },
      { key: 'errors', label: 'Errors', values: column((m) => m.errors), tone: 'errors' },
    ],
  });
}

function drawOffenders(r) {
  const rows = [
    ...(r.offenders.users || []).map((o) => [`User ${o.id}`, o]),
    ...(r.offenders.addresses || []).map((o) => [`Address ${o.ip}`, o]),
  ];
  ui.offendersEmpty.hidden = rows.length > 0;
  ui.offenders.replaceChildren(
    ...rows.map(([who, o]) =>
      el(
        'tr',
        {},
        el('th', { scope: 'row', text: who }),
        el('td', { class: 'num', text: formatNumber(o.refusals) }),
        el('td', { text: o.label || '' }),
      ),
    ),
  );
}

function drawWaits(r) {
  const buckets = (r.waits.buckets || []).filter((b) => b.count > 0);
  ui.waitsEmpty.hidden = buckets.length > 0;
  ui.waits.replaceChildren(
    ...buckets.map((b) =>
      el('tr', {}, el('th', { scope: 'row', text: waitText(b) }), el('td', { class: 'num', text: formatNumber(b.count) })),
    ),
  );
}

async function loadReport() {
  const item = itemOfPage();
  if (!item) {
    announce(ui.error, 'This page shows one item’s report: open it from the Report link of an item on the dashboard.', 'error');
    return;
  }
  const report = await loadPanel(`/admin/api/items/${item}/report`, ui.error, 'the report');
  if (!report) return;
  ui.body.hidden = false;
  drawSummary(report);
  drawMinutes(report);
  drawOffenders(report);
  drawWaits(report);
}

async function download(format, button) {
  const item = itemOfPage();
  if (!item) return;
  button.disabled = true;
  const file = await adminDownload(`/admin/api/items/${item}/report?format=${format}`, `item-${item}-report.${format}`);
  button.disabled = false;
  if (!signedIn()) return;
  if (!file.ok) {
    if (file.status !== 401) announce(ui.exported, `Could not export the report: ${file.message}`, 'error');
    return;
  }
  const size = saveFile(file);
  announce(ui.exported, `Downloaded ${file.name} (${size}).`, 'ok');
}

ui.csv.addEventListener('click', () => download('csv', ui.csv));
ui.json.addEventListener('click', () => download('json', ui.json));
ui.refresh.addEventListener('click', loadReport);

whenSessionLost(() => signOut('Your admin session is no longer valid. Please sign in again.'));
startSignIn({ start: loadReport, stop() {} });
