// k6 load test for seckill: a stampede when the sale opens, plus steady shoppers.
//
//   k6 run loadtest/k6/seckill.js
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e USERS=2000 -e RATE=5000 -e DURATION=30s loadtest/k6/seckill.js
//   k6 run -e ITEM_ID=1 loadtest/k6/seckill.js          # buy an existing item instead of creating one
//
// Parameters (k6 -e NAME=value), defaults in brackets:
//   BASE_URL      [http://127.0.0.1:8080]  one app instance, reached directly (see loadtest/README.md)
//   USERS         [1000]   shoppers: dev-login tokens fetched in setup(); a shopper is a user id with
//                          its own client IP. Every VU holds a copy of setup()'s data (about 170
//                          bytes per user), so memory grows with USERS x VUs
//   IDENTITY      [iteration]  which shopper a request comes from: "iteration" = the next shopper in
//                          turn (the crowd is USERS shoppers clicking over and over, whatever the
//                          number of VUs); "vu" = one shopper per VU, always the same
//   RATE          [5000]   peak purchase arrivals per second in the stampede: 5x the api limit (1000/s)
//   DURATION      [30s]    how long the stampede holds its peak (k6 duration: 30s, 2m, 1m30s)
//   ITEM_ID       [unset]  buy this item; unset = create one through the admin API in setup()
//   ADMIN_TOKEN   [dev-admin-token]  bearer token for POST /admin/api/items
//   STOCK         [100]    stock of the item setup() creates
//   SALE_OPENS_IN [3]      seconds after setup() the created item's sale opens, so the stampede
//                          starts against a closed sale (409 SALE_NOT_STARTED) and meets the opening
//   SHOPPER_RATE  [20]     steady shoppers per second (browse the items, then buy)
//   FIRST_USER_ID [1]      first user id (the client addresses move with it); change it to run
//                          again within a minute with fresh user and ip quotas
//   P95_MS, P99_MS [500, 1000]  latency thresholds on POST /seckill
//   SUMMARY_JSON  [unset]  also write k6's full summary data to this file
//
// Client IPs: the app takes the client IP from X-Forwarded-For only when the TCP peer is a
// trusted proxy (default: loopback), so on loopback every request carries its shopper's own
// address and the ip limit (5 per 60 s) counts shoppers separately. Addresses come from
// 198.18.0.0/15, the range set aside for benchmarking; they are only written into the header.
//
// Why "iteration" is the default: the limiter only counts admitted requests, and a shopper
// is admitted 3 times a minute at most (user limit). With one shopper per VU, admissions
// stop at 3 x VUs per minute and never reach the api limit (1000/s) however high RATE is;
// with the crowd taking turns, USERS shoppers can offer up to 3 x USERS admissions at the
// opening, and the api limit shows.

import http from 'k6/http';
import { check, fail } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const USERS = positiveInt('USERS', 1000);
const RATE = positiveInt('RATE', 5000);
const DURATION = __ENV.DURATION || '30s';
const ITEM_ID = __ENV.ITEM_ID ? positiveInt('ITEM_ID', 0) : null;
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || 'dev-admin-token';
const STOCK = positiveInt('STOCK', 100);
const SALE_OPENS_IN = nonNegativeInt('SALE_OPENS_IN', 3);
const SHOPPER_RATE = positiveInt('SHOPPER_RATE', 20);
const FIRST_USER_ID = positiveInt('FIRST_USER_ID', 1);
const IDENTITY = __ENV.IDENTITY || 'iteration';
if (IDENTITY !== 'iteration' && IDENTITY !== 'vu') throw new Error(`IDENTITY must be "iteration" or "vu", got "${IDENTITY}"`);
const P95_MS = positiveInt('P95_MS', 500);
const P99_MS = positiveInt('P99_MS', 1000);

const RAMP_UP = '5s'; // the doors open: 0 -> RATE
const RAMP_DOWN = '5s'; // the crowd thins out: RATE -> 0
const TOTAL_SECONDS = seconds(RAMP_UP) + seconds(DURATION) + seconds(RAMP_DOWN);

// The answers /seckill may give under load; anything else counts as unexpected.
const CONFLICT_CODES = ['SOLD_OUT', 'ALREADY_PURCHASED', 'SALE_NOT_STARTED', 'SALE_ENDED', 'IDEMPOTENCY_IN_PROGRESS'];
const DIMENSIONS = ['api', 'user', 'ip'];
// Refusals of an overloaded or broken backend: counted by name, and failures for the checks.
const UNAVAILABLE_CODES = ['LIMITER_UNAVAILABLE', 'ORDER_FAILED', 'OVERLOADED', 'ORDERS_UNAVAILABLE'];

// One counter per answer, so the end-of-test summary shows each count by name.
const ordered = new Counter('seckill_200_order');
const rateLimited = {};
for (const d of DIMENSIONS) rateLimited[d] = new Counter(`seckill_429_${d}`);
const conflicts = {};
for (const c of CONFLICT_CODES) conflicts[c] = new Counter(`seckill_409_${c.toLowerCase()}`);
const unavailable = {};
for (const c of UNAVAILABLE_CODES) unavailable[c] = new Counter(`seckill_503_${c.toLowerCase()}`);
const unexpected = new Counter('seckill_unexpected');

/** @type {import('k6/options').Options} */
export const options = {
  setupTimeout: '180s',
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
  scenarios: {
    // Everyone clicks "buy" at once, far beyond the api limit, and keeps clicking.
    stampede: {
      executor: 'ramping-arrival-rate',
      exec: 'stampede',
      startRate: 0,
      timeUnit: '1s',
      preAllocatedVUs: Math.min(USERS, 300),
      maxVUs: USERS,
      stages: [
        { target: RATE, duration: RAMP_UP },
        { target: RATE, duration: DURATION },
        { target: 0, duration: RAMP_DOWN },
      ],
    },
    // Ordinary shoppers at a steady pace: look at the items, then buy.
    shoppers: {
      executor: 'constant-arrival-rate',
      exec: 'shopper',
      rate: SHOPPER_RATE,
      timeUnit: '1s',
      duration: `${TOTAL_SECONDS}s`,
      preAllocatedVUs: Math.min(USERS, 20),
      maxVUs: Math.min(USERS, 200),
    },
  },
  thresholds: {
    'http_req_duration{endpoint:seckill}': [`p(95)<${P95_MS}`, `p(99)<${P99_MS}`],
    // 409 and 429 are answers, not failures (see setResponseCallback below).
    'http_req_failed{endpoint:seckill}': ['rate<0.01'],
    checks: ['rate>0.99'],
    seckill_unexpected: ['count==0'],
  },
};

// Only statuses outside these count in http_req_failed.
http.setResponseCallback(http.expectedStatuses(200, 201, 409, 429));

const JSON_HEADERS = { 'Content-Type': 'application/json' };

export function setup() {
  const tokens = []; // only the tokens: user id and IP follow from the index
  const BATCH = 100; // logins in flight at once
  for (let start = 0; start < USERS; start += BATCH) {
    const requests = [];
    for (let i = start; i < Math.min(start + BATCH, USERS); i++) {
      requests.push({
        method: 'POST',
        url: `${BASE_URL}/api/session`,
        body: JSON.stringify({ userId: FIRST_USER_ID + i }),
        params: { headers: JSON_HEADERS, tags: { endpoint: 'session' } },
      });
    }
    http.batch(requests).forEach((res, k) => {
      const index = start + k;
      if (res.status !== 200) {
        fail(`POST /api/session for user ${FIRST_USER_ID + index} answered ${res.status}: ${res.body}`);
      }
      tokens.push(res.json('token'));
    });
  }
  // The item comes last, so SALE_OPENS_IN counts from about when the scenarios start.
  const itemId = ITEM_ID || createItem();
  if (ITEM_ID) requireItem(ITEM_ID);
  console.log(`setup: ${tokens.length} users, item ${itemId}, ${BASE_URL}`);
  return { itemId, tokens };
}

export function stampede(data) {
  buy(data, me(data), {});
}

export function shopper(data) {
  const res = http.get(`${BASE_URL}/api/items`, { tags: { endpoint: 'items' } });
  check(res, {
    'items: status is 200': (r) => r.status === 200,
    'items: lists the item': (r) => r.status === 200 && listsItem(r, data.itemId),
  });
  const who = me(data);
  // A real client sends one key per click and repeats it when it retries the same click.
  buy(data, who, { 'Idempotency-Key': `k6-${who.userId}-${exec.scenario.iterationInTest}` });
}

// The shopper behind this request: its user's token and its own client IP (see IDENTITY).
// With IDENTITY=vu and more VUs than USERS, VUs share shoppers (and so their quotas).
function me(data) {
  const n = IDENTITY === 'vu' ? exec.vu.idInTest - 1 : exec.scenario.iterationInTest;
  const index = n % data.tokens.length;
  return { userId: FIRST_USER_ID + index, token: data.tokens[index], ip: clientIp(FIRST_USER_ID - 1 + index) };
}

function buy(data, who, extraHeaders) {
  const res = http.post(`${BASE_URL}/seckill`, JSON.stringify({ itemId: data.itemId }), {
    headers: Object.assign(
      {
        'Content-Type': 'application/json',
        Authorization: `Bearer ${who.token}`,
        'X-Forwarded-For': who.ip,
      },
      extraHeaders,
    ),
    tags: { endpoint: 'seckill' },
  });
  record(res);
}

function record(res) {
  let body = {};
  try {
    body = res.json() || {};
  } catch (e) {
    body = {};
  }
  check(res, {
    'seckill: status is 200, 409 or 429': (r) => r.status === 200 || r.status === 409 || r.status === 429,
    'seckill: body matches the status': (r) =>
      (r.status === 200 && typeof body.orderId === 'string') ||
      (r.status === 409 && CONFLICT_CODES.indexOf(body.code) >= 0) ||
      (r.status === 429 && body.code === 'RATE_LIMITED' && DIMENSIONS.indexOf(body.dimension) >= 0),
  });
  if (res.status === 200 && typeof body.orderId === 'string') {
    ordered.add(1);
  } else if (res.status === 429 && rateLimited[body.dimension]) {
    rateLimited[body.dimension].add(1);
  } else if (res.status === 409 && conflicts[body.code]) {
    conflicts[body.code].add(1);
  } else if (res.status === 503 && unavailable[body.code]) {
    unavailable[body.code].add(1);
  } else {
    unexpected.add(1, { status: String(res.status), code: String(body.code || '') });
  }
}

function createItem() {
  const now = Date.now();
  const item = {
    name: `k6 flash sale ${new Date(now).toISOString()}`,
    priceCents: 100,
    stock: STOCK,
    startsAt: new Date(now + SALE_OPENS_IN * 1000).toISOString(),
    endsAt: new Date(now + 3600 * 1000).toISOString(),
  };
  const res = http.post(`${BASE_URL}/admin/api/items`, JSON.stringify(item), {
    headers: Object.assign({ Authorization: `Bearer ${ADMIN_TOKEN}` }, JSON_HEADERS),
    tags: { endpoint: 'admin' },
  });
  if (res.status !== 201) fail(`POST /admin/api/items answered ${res.status}: ${res.body}`);
  return res.json('id');
}

function requireItem(itemId) {
  const res = http.get(`${BASE_URL}/api/items`, { tags: { endpoint: 'items' } });
  if (res.status !== 200 || !listsItem(res, itemId)) {
    fail(`item ${itemId} is not on sale at ${BASE_URL} (GET /api/items answered ${res.status})`);
  }
}

function listsItem(res, itemId) {
  const items = res.json('items') || [];
  return items.some((item) => item.id === itemId);
}

// 198.18.0.0/15, last octet 1..254, same scheme as loadtest/jmeter/gen-users.sh: user id N
// gets address number N - 1.
function clientIp(index) {
  const second = 18 + Math.floor(index / (256 * 254));
  const third = Math.floor(index / 254) % 256;
  const fourth = (index % 254) + 1;
  return `198.${second}.${third}.${fourth}`;
}

export function handleSummary(data) {
  const metric = (name) => data.metrics[name];
  const count = (name) => (metric(name) ? metric(name).values.count : 0);
  const ms = (name, stat) => {
    const m = metric(name);
    return m && m.values[stat] !== undefined ? m.values[stat].toFixed(1) : '-';
  };
  const row = (label, value) => `  ${label.padEnd(40)} ${String(value).padStart(10)}`;

  const lines = ['', 'seckill load test', ''];
  lines.push(row('POST /seckill answers', ''));
  lines.push(row('  200 order', count('seckill_200_order')));
  for (const d of DIMENSIONS) lines.push(row(`  429 RATE_LIMITED ${d}`, count(`seckill_429_${d}`)));
  for (const c of CONFLICT_CODES) lines.push(row(`  409 ${c}`, count(`seckill_409_${c.toLowerCase()}`)));
  for (const c of UNAVAILABLE_CODES) lines.push(row(`  503 ${c}`, count(`seckill_503_${c.toLowerCase()}`)));
  lines.push(row('  unexpected (other status or body)', count('seckill_unexpected')));
  lines.push('');
  const seckill = 'http_req_duration{endpoint:seckill}';
  lines.push(row('/seckill latency p50, ms', ms(seckill, 'med')));
  lines.push(row('/seckill latency p95, ms', ms(seckill, 'p(95)')));
  lines.push(row('/seckill latency p99, ms', ms(seckill, 'p(99)')));
  lines.push(row('/seckill latency max, ms', ms(seckill, 'max')));
  lines.push(row('requests, all endpoints', count('http_reqs')));
  lines.push(row('requests per second', metric('http_reqs') ? metric('http_reqs').values.rate.toFixed(0) : '-'));
  // Arrivals k6 could not start for lack of free VUs: the offered load fell short of RATE.
  lines.push(row('dropped iterations', count('dropped_iterations')));
  lines.push('');
  lines.push('thresholds');
  for (const name of Object.keys(data.metrics)) {
    const thresholds = data.metrics[name].thresholds || {};
    for (const expr of Object.keys(thresholds)) {
      lines.push(`  ${thresholds[expr].ok ? 'ok  ' : 'FAIL'}  ${name}: ${expr}`);
    }
  }
  lines.push('');

  const out = { stdout: lines.join('\n') + '\n' };
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data, null, 2);
  return out;
}

function positiveInt(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
}

function nonNegativeInt(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be an integer >= 0, got "${raw}"`);
  return value;
}

// Seconds in a k6 duration such as "30s", "2m", "1m30s", "1h", "500ms".
function seconds(duration) {
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let total = 0;
  let matched = '';
  let part;
  while ((part = re.exec(duration)) !== null) {
    total += Number(part[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[part[2]];
    matched += part[0];
  }
  if (matched === '' || matched !== duration) throw new Error(`not a duration: "${duration}"`);
  return Math.ceil(total);
}
