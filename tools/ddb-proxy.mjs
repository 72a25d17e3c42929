#!/usr/bin/env node
// A proxy in front of DynamoDB Local that behaves like a network and a busy table: it adds a delay to every request
// and answers a share of write requests with DynamoDB's throttling errors, as DynamoDB answers them (HTTP 400, a JSON
// body whose __type names ProvisionedThroughputExceededException or ThrottlingException). Everything else passes
// through unchanged.
//
//   node tools/ddb-proxy.mjs --target http://127.0.0.1:8000 [--port 0] [--delay-ms 0] [--throttle 0.1]
//        [--throttle-error ProvisionedThroughputExceededException|ThrottlingException] [--seed 1]
//   import { startProxy } from './ddb-proxy.mjs'
//
// Prints its base URL once listening. GET /__proxy/stats answers {"requests", "writes", "throttled", "held",
// "released"} so far. Writes are PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems and
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

export async function startProxy({ target, port = 0, delayMs = 0, throttle = 0, throttleError = 'ProvisionedThroughputExceededException', seed = 1 }) {
  if (!TYPES[throttleError]) throw new Error(`--throttle-error must be one of ${Object.keys(TYPES).join(', ')}`);
  const upstream = new URL(target);
  const random = generator(seed);
  const stats = { requests: 0, writes: 0, throttled: 0, held: 0, released: 0 };
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
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.url.startsWith('/__proxy/')) return control(req, res, body);
      const operation = String(req.headers['x-amz-target'] ?? '').split('.').pop();
      stats.requests += 1;
      const write = WRITES.has(operation);
      if (write) stats.writes += 1;
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
      const throttled = write && random() < throttle;
      if (throttled) stats.throttled += 1;
      setTimeout(() => {
        if (throttled) {
          const answer = JSON.stringify({ __type: TYPES[throttleError], message: MESSAGES[throttleError] });
          res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': `proxy-${stats.requests}`, 'content-length': Buffer.byteLength(answer) });
          return res.end(answer);
        }
        const out = forward(req, (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        });
        out.on('error', (e) => {
          res.writeHead(502, { 'content-type': 'text/plain' });
          res.end(`ddb-proxy: ${e.message}`);
        });
        out.end(body);
      }, delayMs);
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
  });
  process.stdout.write(`${proxy.url}\n`);
}
