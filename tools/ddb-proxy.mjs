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
// Prints its base URL once listening. GET /__proxy/stats answers {"requests", "writes", "throttled"} so far.
// Writes are PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems and BatchExecuteStatement.
import { request as httpRequest, createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'TransactWriteItems', 'BatchExecuteStatement']);
const TYPES = {
  ProvisionedThroughputExceededException: 'com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException',
  ThrottlingException: 'com.amazon.coral.availability#ThrottlingException',
};
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
  const stats = { requests: 0, writes: 0, throttled: 0 };
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/__proxy/stats') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(stats));
    }
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const operation = String(req.headers['x-amz-target'] ?? '').split('.').pop();
      stats.requests += 1;
      const write = WRITES.has(operation);
      if (write) stats.writes += 1;
      const throttled = write && random() < throttle;
      if (throttled) stats.throttled += 1;
      setTimeout(() => {
        if (throttled) {
          const answer = JSON.stringify({ __type: TYPES[throttleError], message: MESSAGES[throttleError] });
          res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': `proxy-${stats.requests}`, 'content-length': Buffer.byteLength(answer) });
          return res.end(answer);
        }
        const forward = httpRequest(
          { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          },
        );
        forward.on('error', (e) => {
          res.writeHead(502, { 'content-type': 'text/plain' });
          res.end(`ddb-proxy: ${e.message}`);
        });
        forward.end(body);
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
