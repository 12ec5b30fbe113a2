// Numbers, money, dates and waits as both pages write them, and the <input> values they
// read back. Nothing here touches the page.

/** The currency prices are shown in (the API only knows cents). */
const CURRENCY = 'USD';

const numberFormat = new Intl.NumberFormat();
/** A count with the reader's digit grouping; anything not a number counts as 0. */
export function formatNumber(n) {
  return numberFormat.format(Number(n) || 0);
}

const moneyFormat = new Intl.NumberFormat(undefined, { style: 'currency', currency: CURRENCY });
export function formatPrice(cents) {
  return moneyFormat.format(Number(cents) / 100);
}

const dateTimeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
export function formatDateTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : dateTimeFormat.format(d);
}

const shortFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
/** "Dec 2, 2026, 6:24 – 7:25 PM": a span of time as short as its ends allow. */
export function formatDateRange(fromIso, toIso) {
  const from = new Date(fromIso);
  const to = new Date(toIso);
  if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime())) return `${fromIso} – ${toIso}`;
  return from <= to ? shortFormat.formatRange(from, to) : `${shortFormat.format(from)} – ${shortFormat.format(to)}`;
}

const timeFormat = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
export function formatTime(date) {
  return timeFormat.format(date);
}

// The shopper page writes every time of day one way, to the minute: formatClock, and
// formatDayClock where the day matters too (its time part is the same).
const clockFormat = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' });
/** "14:35" (or "2:35 PM"): a time of day (a Date, an ISO string or ms) to the minute. */
export function formatClock(when) {
  const d = new Date(when);
  return Number.isNaN(d.getTime()) ? String(when) : clockFormat.format(d);
}

const dayClockFormat = new Intl.DateTimeFormat(undefined, {
  year: 'numeric',
  month: 'short',
  day: 'numeric',
  hour: 'numeric',
  minute: '2-digit',
});
/** "Dec 4, 2026, 2:35 PM": a day and its time, the time as formatClock writes it. */
export function formatDayClock(when) {
  const d = new Date(when);
  return Number.isNaN(d.getTime()) ? String(when) : dayClockFormat.format(d);
}

const percentFormat = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 1 });
/** 0.256 → "25.6%" in the reader's way; anything not a number counts as 0. */
export function formatPercent(share) {
  return percentFormat.format(Number(share) || 0);
}

/** "45 s", "4 min 12 s", "2 h 5 min", "3 d 4 h": a span of time, two units at most. */
export function formatDuration(ms) {
  const total = Math.max(0, Math.round(ms / 1000));
  const units = [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1],
  ];
  const parts = [];
  let rest = total;
  for (const [name, size] of units) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n > 0 || (parts.length > 0 && parts.length < 2)) parts.push(n > 0 ? `${n} ${name}` : null);
    if (parts.length >= 2) break;
  }
  const shown = parts.filter(Boolean);
  return shown.length ? shown.join(' ') : '0 s';
}

/** "2d 03:04:05", "03:04:05" or "04:05" for a positive number of milliseconds. */
export function formatCountdown(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const days = Math.floor(total / 86400);
  const h = Math.floor((total % 86400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const pad = (n) => String(n).padStart(2, '0');
  const clock = h > 0 || days > 0 ? `${pad(h)}:${pad(m)}:${pad(s)}` : `${pad(m)}:${pad(s)}`;
  return days > 0 ? `${days}d ${clock}` : clock;
}

/** "12 s", "1 min 5 s": a wait in words. */
export function formatWait(ms) {
  const total = Math.max(1, Math.ceil(ms / 1000));
  if (total < 60) return `${total} s`;
  const m = Math.floor(total / 60);
  const s = total % 60;
  return s ? `${m} min ${s} s` : `${m} min`;
}

/** "the order failed" → "The order failed.": a server message as a sentence. */
export function sentence(text) {
  const t = String(text).trim();
  return t.charAt(0).toUpperCase() + t.slice(1).replace(/[.!\s]*$/, '.');
}

/** A value of <input type="datetime-local"> (browser's time zone) as RFC 3339 UTC. */
export function localInputToIso(value) {
  if (!value) return null;
  const d = new Date(value); // no zone in the string: parsed as local time
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

/** A Date as the value of <input type="datetime-local"> in the browser's time zone. */
export function dateToLocalInput(date) {
  const pad = (n) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}
