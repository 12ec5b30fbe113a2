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

const timeFormat = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
export function formatTime(date) {
  return timeFormat.format(date);
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
