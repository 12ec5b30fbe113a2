// Line charts drawn as inline SVG with DOM calls: no library, nothing but attributes and
// CSS classes (the Content-Security-Policy allows no inline style). Each line carries the
// numbers it plots in `data-values` (comma-separated, one per `data-step` seconds, 1
// unless said, from the chart's `data-from`), and each chart has a table of its series
// for screen readers.
import { formatClock, formatNumber } from '../format.js';

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 180;
const PAD = { top: 10, right: 10, bottom: 22, left: 44 };
/** Colour classes (admin.css) for series without a fixed one, in order. */
const PALETTE = 8;

function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

/** 0, a round step, 2 steps… up to at least `max`: the y axis's ticks. */
function ticks(max) {
  if (max <= 0) return [0, 1];
  const rough = max / 3;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= rough) || magnitude * 10;
  const top = Math.max(1, Math.ceil(max / step)) * step;
  const out = [];
  for (let v = 0; v <= top + step / 2; v += step) out.push(Math.round(v * 1e6) / 1e6);
  return out;
}

/** The SVG path of `values`; a null breaks the line (no sample that second). */
function pathOf(values, x, y) {
  let d = '';
  let drawing = false;
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      drawing = false;
      return;
    }
    d += `${drawing ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
    drawing = true;
  });
  return d;
}

/** A past span's clock times along the bottom, about five, the first and the last. */
function clockAxis(points, from, step, x, width) {
  const group = svg('g', { class: 'chart-axis', 'aria-hidden': 'true' });
  const labels = Math.min(points, width < 420 ? 3 : 5);
  const last = points - 1;
  const at = new Set(Array.from({ length: labels }, (_, k) => (labels === 1 ? last : Math.round((k * last) / (labels - 1)))));
  for (const i of at) {
    const anchor = i === 0 && last > 0 ? 'start' : i === last ? 'end' : 'middle';
    const label = formatClock(new Date((from + i * step) * 1000).toISOString());
    group.append(svg('text', { x: x(i), y: HEIGHT - 6, 'text-anchor': anchor }, label));
  }
  return group;
}

/** "−5 min" … "now" along the bottom, one label a minute (fewer when narrow). */
function timeAxis(points, step, x, width) {
  const group = svg('g', { class: 'chart-axis', 'aria-hidden': 'true' });
  const perMinute = 60 / step;
  const minutes = Math.floor(points / perMinute);
  const every = width < 420 ? 2 : 1;
  for (let m = 0; m <= minutes; m += every) {
    const i = points - 1 - m * perMinute;
    const label = m === 0 ? 'now' : `−${m} min`;
    const anchor = m === 0 ? 'end' : m === minutes ? 'start' : 'middle';
    group.append(svg('text', { x: x(Math.max(0, i)), y: HEIGHT - 6, 'text-anchor': anchor }, label));
  }
  return group;
}

/**
 * Draws (replaces) a line chart in `figure`.
 *   chart: { name, title, from (unix seconds), step? (seconds a point, 1), kind? ('level':
 *            the latest value counts, not the total), max? (the y axis's top at least:
 *            100 for percentages), unit? (written after every number: '%'), clock? (a
 *            past span: clock times along the bottom, not "−N min … now"), per? (what a
 *            point counts: 'second', 'minute'), lines: [{ key, label, values, tone?,
 *            dashed? }] }
 * `tone` is a fixed colour class; without one a line takes the next palette colour.
 * A `dashed` line (and its legend swatch) is drawn dashed: what would have happened,
 * beside what did.
 * Returns nothing; the figure holds the SVG, a legend and a hidden table.
 */
export function renderLineChart(figure, chart) {
  const step = chart.step || 1;
  const width = Math.max(260, Math.round(figure.clientWidth || 600));
  const points = Math.max(1, ...chart.lines.map((l) => l.values.length));
  const max = Math.max(chart.max || 0, ...chart.lines.flatMap((l) => l.values.filter((v) => v !== null)));
  const unit = chart.unit || '';
  const show = (v) => `${formatNumber(v)}${unit}`;
  const yTicks = ticks(max);
  const top = yTicks[yTicks.length - 1];
  const plotW = width - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (points === 1 ? plotW : (i / (points - 1)) * plotW);
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  const grid = svg('g', { class: 'chart-grid', 'aria-hidden': 'true' });
  for (const t of yTicks) {
    grid.append(
      svg('line', { x1: PAD.left, x2: width - PAD.right, y1: y(t), y2: y(t) }),
      svg('text', { x: PAD.left - 6, y: y(t) + 4, 'text-anchor': 'end' }, show(t)),
    );
  }

  let next = 0;
  const lines = chart.lines.map((line) => ({
    ...line,
    tone: line.tone || `c${next++ % PALETTE}`,
    total: line.values.reduce((a, v) => a + (v || 0), 0),
    last: [...line.values].reverse().find((v) => v !== null && v !== undefined) ?? null,
  }));
  const plotted = svg('g', { class: 'chart-lines' });
  for (const line of lines) {
    const path = svg('path', {
      d: pathOf(line.values, x, y) || `M${PAD.left},${y(0)}`,
      class: `chart-line series-${line.tone}${line.dashed ? ' chart-line-dashed' : ''}`,
      'data-series': line.key,
      'data-values': line.values.map((v) => (v === null || v === undefined ? '' : v)).join(','),
    });
    path.append(svg('title', {}, line.label));
    plotted.append(path);
  }

  const summary = lines.map((l) => `${l.label} ${show(chart.kind === 'level' ? l.last ?? 0 : l.total)}`).join(', ');
  const picture = svg(
    'svg',
    {
      class: 'chart-svg',
      viewBox: `0 0 ${width} ${HEIGHT}`,
      width,
      height: HEIGHT,
      role: 'img',
      'aria-label': `${chart.title}: ${summary || 'no data'}`,
      'data-chart': chart.name,
      'data-from': chart.from,
      'data-step': step,
    },
    grid,
    chart.clock ? clockAxis(points, Number(chart.from), step, x, width) : timeAxis(points, step, x, width),
    plotted,
  );

  const legend = document.createElement('ul');
  legend.className = 'chart-legend';
  legend.setAttribute('aria-hidden', 'true');
  for (const l of lines) {
    const item = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = `swatch series-${l.tone}${l.dashed ? ' swatch-dashed' : ''}`;
    const figureText = chart.kind === 'level' ? (l.last === null ? '–' : show(l.last)) : show(l.total);
    item.append(swatch, `${l.label} `, Object.assign(document.createElement('strong'), { textContent: figureText }));
    legend.append(item);
  }

  figure.replaceChildren(picture, legend, table(chart, lines, show));
}

/** Per series: the total (or the latest level) and the busiest point. */
function table(chart, lines, show) {
  const level = chart.kind === 'level';
  const node = document.createElement('table');
  const caption = document.createElement('caption');
  caption.textContent = chart.title;
  const head = document.createElement('tr');
  for (const text of ['Series', level ? 'Latest' : 'Total', level ? 'Lowest' : `Peak per ${chart.per || 'second'}`]) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = text;
    head.append(th);
  }
  const body = document.createElement('tbody');
  for (const l of lines) {
    const known = l.values.filter((v) => v !== null && v !== undefined);
    const row = document.createElement('tr');
    row.dataset.series = l.key;
    const th = document.createElement('th');
    th.scope = 'row';
    th.textContent = l.label;
    const first = document.createElement('td');
    first.textContent = level ? (l.last === null ? '–' : show(l.last)) : show(l.total);
    const second = document.createElement('td');
    second.textContent = known.length ? show(level ? Math.min(...known) : Math.max(...known)) : '–';
    row.append(th, first, second);
    body.append(row);
  }
  const thead = document.createElement('thead');
  thead.append(head);
  node.append(caption, thead, body);
  // Hidden by a box around it: a table is never narrower than its content, whatever
  // its own width says, and would widen the page.
  const box = document.createElement('div');
  box.className = 'visually-hidden';
  box.append(node);
  return box;
}
