// The admin dashboard's entry: live counters and their charts, items (create, edit,
// pause, resume, end, archive, their history), an item's waiting room, orders (and their
// export), the top offenders and the blocks, the rate-limit rules editor and its audit
// trail, the edge limiter's domains, one module each.
// This one opens the panels when a token is accepted and closes them when the session
// ends. The token lives in sessionStorage only (session.js).
import { poll } from '../dom.js';
import { loadAudit } from './audit.js';
import './create-item.js';
import { loadItems } from './items.js';
import { loadBlocks, loadOffenders } from './offenders.js';
import { loadOrders } from './orders.js';
import { loadPolicies } from './policies.js';
import { loadDomains } from './rls-domains.js';
import { loadSeries } from './series.js';
import { whenSessionLost } from './session.js';
import { signOut, startSignIn } from './signin.js';
import { loadStats } from './stats.js';
import { ROOM_SAMPLE_MS, sampleRoom } from './waiting-room.js';

const STATS_EVERY_MS = 2000;
const ITEMS_EVERY_MS = 2000;
const SERIES_EVERY_MS = 1000;
const OFFENDERS_EVERY_MS = 15000;

/** Stop functions of the panels' polls. */
let polls = [];

function stop() {
  for (const stopPoll of polls) stopPoll();
  polls = [];
}

function start() {
  stop();
  polls = [
    poll(loadStats, STATS_EVERY_MS),
    poll(loadItems, ITEMS_EVERY_MS),
    poll(loadSeries, SERIES_EVERY_MS),
    poll(sampleRoom, ROOM_SAMPLE_MS),
    poll(loadOffenders, OFFENDERS_EVERY_MS),
  ];
  loadOrders(1);
  loadPolicies();
  loadDomains();
  loadAudit();
  loadBlocks();
}

whenSessionLost(() => signOut('Your admin session is no longer valid. Please sign in again.'));
startSignIn({ start, stop });
