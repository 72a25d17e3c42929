#!/usr/bin/env node
// A proxy in front of DynamoDB Local that behaves like a network and a busy table: it adds a delay to every request
// and answers a share of write requests with DynamoDB's throttling errors, as DynamoDB answers them (HTTP 400, a JSON
// body whose __type names ProvisionedThroughputExceededException or ThrottlingException). Everything else passes
// through unchanged.
//
//   node tools/ddb-proxy.mjs --target http://127.0.0.1:8000 [--port 0] [--delay-ms 0] [--throttle 0.1]
//        [--throttle-error ProvisionedThroughputExceededException|ThrottlingException] [--seed 1]
//        [--mrsc] [--conflict 0.05] [--write-latency-ms 20] [--replicas us-east-1,us-east-2,us-west-2]
//        [--consistency STRONG|EVENTUAL] [--global-tables T1,T2] [--lose 0.02] [--lose-match TEXT] [--late-ms 15000] [--idle-close-ms 3000] [--parent-pid PID]
//   import { startProxy } from './ddb-proxy.mjs'
//
// As a stand-in for one Region's endpoint of a multi-Region strongly consistent (MRSC) global table, with --mrsc:
// TransactWriteItems and TransactGetItems are refused (HTTP 400, ValidationException; AWS documents only that MRSC
// tables return an error for them), a share --conflict of the single-item writes (PutItem, UpdateItem, DeleteItem,
// BatchWriteItem) is answered with ReplicatedWriteConflictException without being carried out, as a write that met a
// change of its item from another Region is, and every write waits --write-latency-ms more, the synchronous
// replication to another Region. --replicas and --consistency make every DescribeTable answer describe a global
// table (Replicas, MultiRegionConsistency; with --mrsc, STRONG unless said otherwise), so a client sees the kind of
// table it writes; with --global-tables, only the tables it names. What it cannot show: real replication (every "Region" shares one DynamoDB Local), conflicts
// caused by real concurrent writers in other Regions (they are drawn at random), reads served by a Region that lost
// its quorum, and MRSC's own latency figures.
//
// Lost answers, as a network loses them: with --lose, a share of the write requests gets no answer at all (the
// connection is closed under it, which the client sees as a connection closed before the message completed) and is
// delivered to DynamoDB anyway, at a random moment up to --late-ms later (0: at once), as a request that reached the
// service whose answer was lost; with --lose-match, only writes whose body contains that text. With --idle-close-ms, a request that comes on a connection idle for longer than that is
// dropped with the connection, unanswered and not delivered: what a client meets that was not running while the
// service closed its idle connection (a warm Lambda between invocations), and writes a request on it before it learns
// of the close. POST /__proxy/set {"lose": P, "lateMs": M} changes the first two while the proxy runs.
//
// Prints its base URL once listening. GET /__proxy/stats answers {"requests", "writes", "throttled", "held",
// "released", "conflicts", "refusedTransactions", "lost", "landedLate", "idleDropped", "describes"} so far. Writes are PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems and
// BatchExecuteStatement.
//
// A write can also be delivered late, as a network can deliver a request whose sender has given up on it:
// POST /__proxy/hold {"match": ["text", ...], "count": 1} holds the next `count` writes whose body contains every
// text. Each is answered at once with DynamoDB's InternalServerError (HTTP 500), which says nothing of whether the
// write was carried out, and kept; POST /__proxy/release sends every held write on to DynamoDB and answers
// {"released", "statuses", "answers"} once DynamoDB has answered them. With "silent": true a held write gets no
// answer at all (its sender's timeout ends the wait, as for a request lost in a network or a driver frozen); the
// connection is closed when the write is released.
import { request as httpRequest, createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'TransactWriteItems', 'BatchExecuteStatement']);
const TYPES = {
  ProvisionedThroughputExceededException: 'com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException',
  ThrottlingException: 'com.amazon.coral.availability#ThrottlingException',
};
const INTERNAL_ERROR = JSON.stringify({
  __type: 'com.amazonaws.dynamodb.v20120810#InternalServerError',
  message: 'Internal server error',
});
const CONFLICT = JSON.stringify({
  __type: 'com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException',
  message: 'The request was rejected because one or more items in the request are being modified by a request in another Region.',
});
const NO_TRANSACTIONS = JSON.stringify({
  __type: 'com.amazon.coral.validate#ValidationException',
  message: 'Transactions are not supported on global tables configured for multi-Region strong consistency',
});
const TRANSACTIONS = new Set(['TransactWriteItems', 'TransactGetItems', 'ExecuteTransaction']);
// The writes another Region's change of the same item can refuse on an MRSC table.
const CONFLICTING = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem']);
const MESSAGES = {
  ProvisionedThroughputExceededException:
    'The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.',
  ThrottlingException: 'Rate of requests exceeds the allowed throughput.',
};

// mulberry32: a small seeded generator, so a run's throttled requests can be repeated.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function startProxy({
  target, port = 0, delayMs = 0, throttle = 0, throttleError = 'ProvisionedThroughputExceededException', seed = 1,
  mrsc = false, conflict = 0, writeLatencyMs = 0, replicas = [], consistency = undefined, lose = 0, lateMs = 0,
  idleCloseMs = 0, globalTables = [], loseMatch = '',
}) {
  if (!TYPES[throttleError]) throw new Error(`--throttle-error must be one of ${Object.keys(TYPES).join(', ')}`);
  const described = consistency ?? (mrsc ? 'STRONG' : replicas.length > 0 ? 'EVENTUAL' : undefined);
  if (described && !['STRONG', 'EVENTUAL'].includes(described)) throw new Error('--consistency must be STRONG or EVENTUAL');
  const upstream = new URL(target);
  const random = generator(seed);
  const stats = {
    requests: 0, writes: 0, throttled: 0, held: 0, released: 0, conflicts: 0, refusedTransactions: 0, lost: 0,
    landedLate: 0, idleDropped: 0, describes: 0,
  };
  const losses = { lose, lateMs };
  const answer = (res, status, text) => {
    res.writeHead(status, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': `proxy-${stats.requests}`, 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  // A DescribeTable answer as a replica of a global table would give it.
  const asGlobal = (text) => {
    const out = JSON.parse(text);
    if (!out.Table) return text;
    if (globalTables.length > 0 && !globalTables.includes(out.Table.TableName)) return text;
    const regions = replicas.length > 0 ? replicas : ['us-east-1', 'us-east-2', 'us-west-2'];
    out.Table.Replicas = regions.map((RegionName) => ({ RegionName, ReplicaStatus: 'ACTIVE' }));
    out.Table.MultiRegionConsistency = described;
    out.Table.GlobalTableVersion = '2019.11.21';
    return JSON.stringify(out);
  };
  // Armed holds ({match, count}) and the writes held so far ({headers, body}).
  const holds = [];
  const held = [];
  // A request to DynamoDB Local with `req`'s method, path and headers; `answer` gets its response.
  const forward = (req, answer) =>
    httpRequest(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } },
      answer,
    );
  const control = (req, res, body) => {
    const reply = (status, value) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (req.method === 'GET' && req.url === '/__proxy/stats') return reply(200, stats);
    if (req.method === 'POST' && req.url === '/__proxy/set') {
      const { lose: p = losses.lose, lateMs: m = losses.lateMs } = JSON.parse(body.toString() || '{}');
      if (!(p >= 0 && p <= 1) || !(m >= 0)) return reply(400, { error: 'lose is a share from 0 to 1, lateMs a delay in ms' });
      Object.assign(losses, { lose: p, lateMs: m });
      return reply(200, losses);
    }
    if (req.method === 'POST' && req.url === '/__proxy/hold') {
      const { match, count = 1, silent = false } = JSON.parse(body.toString() || '{}');
      if (!Array.isArray(match) || match.some((m) => typeof m !== 'string')) return reply(400, { error: 'match must be a list of strings' });
      holds.push({ match, count, silent: silent === true });
      return reply(200, { armed: holds.length });
    }
    if (req.method === 'POST' && req.url === '/__proxy/release') {
      const writes = held.splice(0);
      for (const w of writes) w.res?.destroy();
      Promise.all(
        writes.map(
          (w) =>
            new Promise((resolve) => {
              const out = forward(w.req, (up) => {
                const answer = [];
                up.on('data', (c) => answer.push(c));
                up.on('end', () => resolve({ status: up.statusCode, body: Buffer.concat(answer).toString() }));
              });
              out.on('error', (e) => resolve({ status: 502, body: e.message }));
              out.end(w.body);
            }),
        ),
      ).then((answers) => {
        stats.released += writes.length;
        reply(200, { released: writes.length, statuses: answers.map((a) => a.status), answers: answers.map((a) => a.body) });
      });
      return undefined;
    }
    return reply(404, { error: `no such control: ${req.method} ${req.url}` });
  };
  const server = createServer((req, res) => {
    const chunks = [];
    // When the connection last finished an answer, for --idle-close-ms.
    const idleSince = req.socket.idleSince;
    res.on('finish', () => {
      req.socket.idleSince = Date.now();
    });
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.url.startsWith('/__proxy/')) return control(req, res, body);
      if (idleCloseMs > 0 && idleSince !== undefined && Date.now() - idleSince > idleCloseMs) {
        stats.idleDropped += 1;
        return req.socket.destroy();
      }
      const operation = String(req.headers['x-amz-target'] ?? '').split('.').pop();
      stats.requests += 1;
      if (operation === 'DescribeTable') stats.describes += 1;
      const write = WRITES.has(operation);
      if (write) stats.writes += 1;
      const losable = write && losses.lose > 0 && (loseMatch === '' || body.toString().includes(loseMatch));
      if (losable && random() < losses.lose) {
        stats.lost += 1;
        req.socket.destroy();
        const landing = { method: req.method, url: req.url, headers: req.headers };
        return setTimeout(() => {
          const out = forward(landing, (up) => {
            up.resume();
            up.on('end', () => {
              stats.landedLate += 1;
            });
          });
          out.on('error', () => {});
          out.end(body);
        }, random() * losses.lateMs);
      }
      const text = write && holds.length > 0 ? body.toString() : '';
      const hold = holds.find((h) => h.count > 0 && h.match.every((m) => text.includes(m)));
      if (hold) {
        hold.count -= 1;
        if (hold.count === 0) holds.splice(holds.indexOf(hold), 1);
        stats.held += 1;
        held.push({ req: { method: req.method, url: req.url, headers: req.headers }, body, res: hold.silent ? res : null });
        if (hold.silent) return undefined;
        res.writeHead(500, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': `proxy-${stats.requests}`, 'content-length': Buffer.byteLength(INTERNAL_ERROR) });
        return res.end(INTERNAL_ERROR);
      }
      if (mrsc && TRANSACTIONS.has(operation)) {
        stats.refusedTransactions += 1;
        return setTimeout(() => answer(res, 400, NO_TRANSACTIONS), delayMs);
      }
      const throttled = write && random() < throttle;
      if (throttled) stats.throttled += 1;
      const conflicted = !throttled && mrsc && CONFLICTING.has(operation) && random() < conflict;
      if (conflicted) stats.conflicts += 1;
      setTimeout(() => {
        if (throttled) return answer(res, 400, JSON.stringify({ __type: TYPES[throttleError], message: MESSAGES[throttleError] }));
        if (conflicted) return answer(res, 400, CONFLICT);
        const out = forward(req, (up) => {
          if (operation === 'DescribeTable' && described && up.statusCode === 200) {
            const parts = [];
            up.on('data', (c) => parts.push(c));
            up.on('end', () => answer(res, 200, asGlobal(Buffer.concat(parts).toString())));
            return;
          }
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        });
        out.on('error', (e) => {
          res.writeHead(502, { 'content-type': 'text/plain' });
          res.end(`ddb-proxy: ${e.message}`);
        });
        out.end(body);
      }, delayMs + (write && mrsc ? writeLatencyMs : 0));
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    stats,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      target: { type: 'string' },
      port: { type: 'string', default: '0' },
      'delay-ms': { type: 'string', default: '0' },
      throttle: { type: 'string', default: '0' },
      'throttle-error': { type: 'string', default: 'ProvisionedThroughputExceededException' },
      seed: { type: 'string', default: '1' },
      mrsc: { type: 'boolean', default: false },
      conflict: { type: 'string', default: '0' },
      'write-latency-ms': { type: 'string', default: '0' },
      replicas: { type: 'string', default: '' },
      consistency: { type: 'string' },
      'global-tables': { type: 'string', default: '' },
      lose: { type: 'string', default: '0' },
      'lose-match': { type: 'string', default: '' },
      'late-ms': { type: 'string', default: '0' },
      'idle-close-ms': { type: 'string', default: '0' },
      'parent-pid': { type: 'string' },
    },
  });
  if (!values.target) {
    process.stderr.write('ddb-proxy: --target URL is required\n');
    process.exit(2);
  }
  const proxy = await startProxy({
    target: values.target,
    port: Number(values.port),
    delayMs: Number(values['delay-ms']),
    throttle: Number(values.throttle),
    throttleError: values['throttle-error'],
    seed: Number(values.seed),
    mrsc: values.mrsc,
    conflict: Number(values.conflict),
    writeLatencyMs: Number(values['write-latency-ms']),
    replicas: values.replicas ? values.replicas.split(',') : [],
    consistency: values.consistency,
    globalTables: values['global-tables'] ? values['global-tables'].split(',') : [],
    lose: Number(values.lose),
    loseMatch: values['lose-match'],
    lateMs: Number(values['late-ms']),
    idleCloseMs: Number(values['idle-close-ms']),
  });
  process.stdout.write(`${proxy.url}\n`);
  // With --parent-pid, the proxy ends when that process does (a test process that never drops its proxy).
  const parent = Number(values['parent-pid'] ?? 0);
  if (parent > 0) {
    setInterval(() => {
      try {
        process.kill(parent, 0);
      } catch {
        process.exit(0);
      }
    }, 1000).unref();
  }
}
