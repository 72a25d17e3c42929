#!/usr/bin/env node
// A stand-in for `cargo lambda watch` that answers the phase functions with scripted results, so that the state
// machine and tools/sfn-local.mjs can be tested without building anything.
//
//   node tools/fake-lambda.mjs [--port N]      prints its base URL once listening (port 0, the default, picks one)
//   import { startFakeLambda } from './fake-lambda.mjs'
//
// Like cargo lambda watch it serves POST /2015-03-31/functions/<name>/invocations, answers a function error with HTTP
// 500 and the {errorType, errorMessage} body (no X-Amz-Function-Error header) and an unknown function with 404.
// GET /calls lists every invocation as {fn, input, status}.
//
// The script is chosen by the TransactionId's prefix: the execution input is {"TransactionId": "<script>-..."}, which
// Begin receives as it is or, from the state machine, as {"Request": {...}, "ExecutionArn": "..."}.
// Each transaction has 3 batches and every call does one batch:
//   committed   Begin, Lock x3, Save x3, Commit, Apply x3, Complete (every batch at once), Release -> Finished/COMMITTED
//   contended   as committed, but the first Lock answers Step Wait, WaitSeconds 5, Contention; Relock goes on
//   patient     as committed, but the first 3 Locks answer Wait, each adding one to Waits; then as committed
//   fault       as committed, but the first Lock fails with InjectedFault (retried by the definition)
//   fault-aws   as fault, answered the way real Lambda does: HTTP 200 with X-Amz-Function-Error: Unhandled
//   canceled    Lock finds a condition false: ROLLED_BACK, Rollback, then Release fails with TransactionCanceled
//   abort       Lock fails with an error no Retry matches, Abort (Rollback with Abort: true), Release fails with
//               TransactionAborted
//   retry       the first attempt's Lock is rolled back by an older transaction: Rollback names Step Retry, Begin
//               (called with {"TransactionId", "Waits"}) starts the second attempt, which commits
//   waited-retry  patient, then retry
// As the phase functions do, every answer carries Waits: the input's (0 when absent), plus one for a Wait.
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const BATCHES = 3;
const ACTIONS = 250;

export function cancellationCause(txId) {
  return JSON.stringify({
    TransactionId: txId,
    Message: 'Transaction cancelled, please refer cancellation reasons for specific reasons [None, ConditionalCheckFailed]',
    CancellationReasons: [{ Code: 'None' }, { Code: 'ConditionalCheckFailed', Message: 'The conditional request failed' }],
  });
}

class FunctionError extends Error {
  constructor(errorType, errorMessage) {
    super(errorMessage);
    this.errorType = errorType;
  }
}

// Phase results of one scripted transaction; every phase advances one batch a call and names the next Step.
function transaction(id) {
  const script = id.replace(/-[^-]*$/, '');
  const done = { lock: 0, save: 0, apply: 0, complete: 0 };
  let lockCalls = 0;
  let state = 'PENDING';
  let aborted = false;
  let attempts = 1;
  let waits = 0;
  const out = (Step, Batch, extra = {}) => ({ TransactionId: id, Step, Batch, Batches: BATCHES, State: state, Actions: ACTIONS, Attempts: attempts, Waits: waits, ...extra });
  const batch = (phase, same, next) => {
    done[phase] += 1;
    return out(done[phase] < BATCHES ? same : next, done[phase]);
  };

  const phases = {
    'saga-begin': (input) => {
      if (script.endsWith('retry') && state === 'ROLLED_BACK' && input.Request === undefined) {
        state = 'PENDING';
        attempts += 1;
        done.lock = 0;
      }
      return out('Lock', 0);
    },
    'saga-lock': () => {
      lockCalls += 1;
      const Contention = { Holder: '01JDQ4V2A8M3K7P5R9T1W6X4YB', Version: 7, SinceMs: 1732266000000, Action: 1, Item: 'Inventory{pk=widget-1}' };
      if (lockCalls === 1 && script === 'contended') return out('Wait', 0, { Waits: waits + 1, WaitSeconds: 5, Contention });
      if (lockCalls <= 3 && (script === 'patient' || script === 'waited-retry')) {
        return out('Wait', 0, { Waits: waits + 1, WaitSeconds: 1, Contention });
      }
      if (lockCalls === 1 && script.startsWith('fault')) throw new FunctionError('InjectedFault', 'injected fault before the first lock write');
      if (script === 'abort') throw new FunctionError('ItemTooLarge', 'item Inventory{pk=unit-007} would exceed 400 KB with its lock');
      if (script === 'canceled' || (script.endsWith('retry') && attempts === 1)) {
        state = 'ROLLED_BACK';
        return out('Rollback', 1);
      }
      return batch('lock', 'Lock', 'Save');
    },
    'saga-save': () => batch('save', 'Save', 'Commit'),
    'saga-commit': () => {
      state = 'COMMITTED';
      return out('Apply', 0);
    },
    'saga-apply': () => batch('apply', 'Apply', 'Complete'),
    'saga-complete': () => out('Release', BATCHES),
    'saga-rollback': (input) => {
      if (input.Abort) {
        if (typeof input.Error?.Cause !== 'string') throw new FunctionError('ValidationError', 'Abort without Error.Cause');
        state = 'ROLLED_BACK';
        aborted = true;
      }
      return out(script.endsWith('retry') ? 'Retry' : 'Release', BATCHES);
    },
    'saga-release': () => {
      if (aborted) throw new FunctionError('TransactionAborted', JSON.stringify({ TransactionId: id, Message: 'Transaction aborted: the state machine gave up' }));
      if (state === 'ROLLED_BACK') throw new FunctionError('TransactionCanceled', cancellationCause(id));
      return out('Finished', BATCHES);
    },
  };
  // Every call starts from the Waits its input carries, as the phase functions do.
  const heard = (input) => {
    waits = Number.isInteger(input?.Waits) ? input.Waits : 0;
  };
  return { phases, heard };
}

export async function startFakeLambda({ port = 0 } = {}) {
  const transactions = new Map();
  const calls = [];

  const server = createServer(async (req, res) => {
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(typeof body === 'string' ? body : JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url === '/calls') return send(200, calls);

    const m = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/.exec(req.url);
    if (req.method !== 'POST' || !m) return send(404, { title: 'Not found' });
    const fn = decodeURIComponent(m[1]);
    let text = '';
    for await (const chunk of req) text += chunk;
    const input = JSON.parse(text || 'null');
    const call = { fn, input, status: 200 };
    calls.push(call);

    const id = input?.TransactionId ?? input?.Request?.TransactionId;
    if (typeof id !== 'string') {
      call.status = 500;
      return send(500, { errorType: 'ValidationError', errorMessage: 'TransactionId is required' });
    }
    if (!transactions.has(id)) transactions.set(id, transaction(id));
    const tx = transactions.get(id);
    const phase = tx.phases[fn];
    if (!phase) {
      call.status = 404;
      return send(404, { title: 'Missing function', detail: `that function doesn't exist as a binary in your project: ${fn}` });
    }
    try {
      tx.heard(input);
      return send(200, phase(input));
    } catch (e) {
      const body = { errorType: e.errorType ?? 'Panic', errorMessage: e.message };
      if (id.startsWith('fault-aws')) return send(200, body, { 'x-amz-function-error': 'Unhandled' });
      call.status = 500;
      return send(500, body);
    }
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    calls,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { port: { type: 'string', default: '0' } } });
  const fake = await startFakeLambda({ port: Number(values.port) });
  process.stdout.write(`${fake.url}\n`);
}
