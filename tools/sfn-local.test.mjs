// The real state machine definition run by tools/sfn-local.mjs against tools/fake-lambda.mjs: no Rust build needed.
//   node --test tools/sfn-local.test.mjs
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { cancellationCause, startFakeLambda } from './fake-lambda.mjs';

const TOOLS = dirname(fileURLToPath(import.meta.url));
const RUNNER = join(TOOLS, 'sfn-local.mjs');
const DEFINITION = join(TOOLS, '../statemachine/transaction.asl.json');
const VALIDATED = join(TOOLS, '../.local/sfn/validated');
const FAST = ['--wait-ms', '10', '--retry-ms', '5'];

let fake;
before(async () => {
  fake = await startFakeLambda();
});
after(() => fake.close());

// Runs the runner as a child process, so that this process's fake server keeps answering meanwhile.
function runner(args, input, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [RUNNER, '--input', '-', ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => {
      let record = null;
      try {
        record = JSON.parse(stdout);
      } catch {
        // Left null: usage errors print nothing on stdout.
      }
      resolve({ code, record, stderr });
    });
    child.stdin.end(JSON.stringify(input));
  });
}

const run = (txId, ...args) => runner(['--lambda-endpoint', fake.url, ...args], { TransactionId: txId });
const callsOf = (txId) =>
  fake.calls.filter((c) => (c.input?.TransactionId ?? c.input?.Request?.TransactionId) === txId);

test('--name names the execution, as StartExecution does', async () => {
  const { code, record } = await run('committed-named', ...FAST, '--name', 'order-1001-attempt');
  assert.equal(code, 0);
  assert.match(record.executionArn, /:execution:dynamo-saga-transaction:order-1001-attempt$/);
  assert.equal(callsOf('committed-named')[0].input.ExecutionArn, record.executionArn);
});

test('a 3-batch transaction commits: every phase in order, one batch a call', async () => {
  const { code, record, stderr } = await run('committed-a', ...FAST);
  assert.equal(code, 0, stderr);
  assert.equal(record.status, 'SUCCEEDED');
  assert.deepEqual(record.output, { TransactionId: 'committed-a', Step: 'Finished', Batch: 3, Batches: 3, State: 'COMMITTED', Actions: 250, Attempts: 1, Waits: 0 });
  const fns = callsOf('committed-a').map((c) => c.fn.replace('saga-', ''));
  assert.deepEqual(fns, ['begin', ...Array(3).fill('lock'), ...Array(3).fill('save'), 'commit', ...Array(3).fill('apply'), 'complete', 'release']);
  assert.equal(record.taskCalls, 13);
  // Each invocation's duration, by function.
  assert.deepEqual(Object.fromEntries(Object.entries(record.taskMs).map(([f, ms]) => [f, ms.length])),
    { 'saga-begin': 1, 'saga-lock': 3, 'saga-save': 3, 'saga-apply': 3, 'saga-commit': 1, 'saga-complete': 1, 'saga-release': 1 });
  assert.ok(Object.values(record.taskMs).flat().every((ms) => Number.isInteger(ms) && ms >= 0));
  // 13 Tasks, 12 Route visits, Released and Committed; each state entered and exited, 3 events per Lambda call.
  assert.equal(record.transitions, 27);
  assert.equal(record.historyEvents, 2 + 27 + 27 + 3 * 13);
  // Begin gets the execution's ARN and start time, from which it names the transaction of a request.
  const begin = callsOf('committed-a')[0].input;
  assert.deepEqual(begin, { Request: { TransactionId: 'committed-a' }, ExecutionArn: record.executionArn, ExecutionStartTime: begin.ExecutionStartTime });
  assert.match(begin.ExecutionStartTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  assert.match(stderr, /Lock +batch 3\/3 +PENDING +250 actions +-> Save/);
});

test('with SAGA_CALL_LOG, each Task invocation is a line: the state machine role invoking the function', async () => {
  const log = join(mkdtempSync(join(tmpdir(), 'sfn-local-')), 'calls.jsonl');
  const { code, record, stderr } = await runner(['--lambda-endpoint', fake.url, ...FAST], { TransactionId: 'committed-logged' }, { SAGA_CALL_LOG: log });
  assert.equal(code, 0, stderr);
  const lines = readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, record.taskCalls);
  const fns = callsOf('committed-logged').map((c) => c.fn);
  assert.deepEqual(lines, fns.map((fn) => ({
    principal: 'state-machine', service: 'lambda', operation: 'Invoke', requests: [{ action: 'lambda:InvokeFunction', resource: `function:${fn}` }],
  })));
});

test('a contended Lock waits, then Relock passes the Contention back; --wait-ms replaces the 5 s wait', async () => {
  const { code, record, stderr } = await run('contended-a', ...FAST);
  assert.equal(code, 0, stderr);
  assert.equal(record.status, 'SUCCEEDED');
  assert.ok(record.durationMs < 3000, `took ${record.durationMs} ms`);
  const locks = callsOf('contended-a').filter((c) => c.fn === 'saga-lock');
  assert.equal(locks[1].input.Contention.Holder, '01JDQ4V2A8M3K7P5R9T1W6X4YB');
  assert.equal(locks[2].input.Contention, undefined);
  assert.match(stderr, /WaitForHolder wait 10ms \(instead of 5s\), held by 01JDQ4V2A8M3K7P5R9T1W6X4YB/);
});

test('Waits reaches every Task: each Wait adds one, and the count survives Relock, the later phases and Retry', async () => {
  for (const id of ['patient-a', 'waited-retry-a']) {
    const { code, record, stderr } = await run(id, ...FAST);
    assert.equal(code, 0, stderr);
    assert.equal(record.output.Waits, 3, id);
    const calls = callsOf(id);
    const relocks = calls.filter((c) => c.fn === 'saga-lock' && c.input.Contention !== undefined);
    assert.deepEqual(relocks.map((c) => c.input.Waits), [1, 2, 3], id);
    // After the third wait, every Task (the Retry's Begin included) hears Waits 3.
    const after = calls.slice(calls.indexOf(relocks[2]) + 1);
    assert.ok(after.length >= 8, `${id}: ${after.map((c) => c.fn).join(' ')}`);
    assert.ok(after.every((c) => c.input.Waits === 3), `${id}: ${JSON.stringify(after.map((c) => [c.fn, c.input.Waits]))}`);
    if (id === 'waited-retry-a') assert.deepEqual(after.find((c) => c.fn === 'saga-begin').input, { TransactionId: id, Waits: 3 });
  }
});

for (const style of ['fault', 'fault-aws']) {
  test(`a function error (${style === 'fault' ? 'HTTP 500 as cargo lambda watch' : '200 with X-Amz-Function-Error as Lambda'}) is retried by its errorType`, async () => {
    const { code, record, stderr } = await run(`${style}-a`, ...FAST);
    assert.equal(code, 0, stderr);
    assert.equal(record.status, 'SUCCEEDED');
    assert.equal(record.taskCalls, 14);
    assert.equal(record.historyEvents, 2 + 27 + 27 + 3 * 14);
    assert.match(stderr, /Lock +failed: InjectedFault: injected fault before the first lock write\n.*Lock +retry 1\/5 after InjectedFault/);
  });
}

test('a rolled-back transaction fails with TransactionCanceled and the error payload as Cause, unchanged', async () => {
  const { code, record, stderr } = await run('canceled-a', ...FAST);
  assert.equal(code, 3, stderr);
  assert.equal(record.status, 'FAILED');
  assert.equal(record.error, 'TransactionCanceled');
  assert.equal(record.cause, JSON.stringify({ errorType: 'TransactionCanceled', errorMessage: cancellationCause('canceled-a') }));
  const reasons = JSON.parse(JSON.parse(record.cause).errorMessage).CancellationReasons;
  assert.deepEqual(reasons.map((r) => r.Code), ['None', 'ConditionalCheckFailed']);
});

test('an error no Retry matches is caught: Abort gets it as Error and Cause, then the execution fails TransactionAborted', async () => {
  const { code, record, stderr } = await run('abort-a', ...FAST);
  assert.equal(code, 3, stderr);
  assert.equal(record.error, 'TransactionAborted');
  assert.equal(JSON.parse(JSON.parse(record.cause).errorMessage).TransactionId, 'abort-a');
  const abort = callsOf('abort-a').find((c) => c.fn === 'saga-rollback');
  assert.equal(abort.input.Abort, true);
  assert.equal(abort.input.Error.Error, 'ItemTooLarge');
  assert.equal(abort.input.Error.Cause, JSON.stringify({ errorType: 'ItemTooLarge', errorMessage: 'item Inventory{pk=unit-007} would exceed 400 KB with its lock' }));
});

test('an attempt rolled back by another transaction loops Rollback -> Retry (the Begin function) -> Lock, and commits in the same execution', async () => {
  const { code, record, stderr } = await run('retry-a', ...FAST);
  assert.equal(code, 0, stderr);
  assert.equal(record.status, 'SUCCEEDED');
  assert.equal(record.output.State, 'COMMITTED');
  assert.equal(record.output.Attempts, 2);
  assert.equal(record.stateEntries.Retry, 1);
  assert.equal(record.stateEntries.Begin, 1);
  const fns = callsOf('retry-a').map((c) => c.fn);
  const rollback = fns.indexOf('saga-rollback');
  assert.ok(rollback > 0, fns.join(' '));
  assert.equal(fns[rollback + 1], 'saga-begin', fns.join(' '));
  assert.equal(fns[rollback + 2], 'saga-lock', fns.join(' '));
  assert.deepEqual(callsOf('retry-a')[rollback + 1].input, { TransactionId: 'retry-a', Waits: 0 });
  assert.equal(fns.filter((f) => f === 'saga-release').length, 1);
});

test('an unknown function is Lambda.ResourceNotFoundException, caught without retries', async () => {
  const sub = '--sub=LockFunctionArn=arn:aws:lambda:us-east-1:000000000000:function:saga-nope';
  const { record } = await run('committed-b', ...FAST, sub);
  assert.equal(record.error, 'TransactionAborted');
  assert.equal(callsOf('committed-b').filter((c) => c.fn === 'saga-nope').length, 1);
  assert.equal(callsOf('committed-b').find((c) => c.fn === 'saga-rollback').input.Error.Error, 'Lambda.ResourceNotFoundException');
});

test('an endpoint that is down is Lambda.ServiceException: Begin tries 1 + 6 times, then the execution fails', async () => {
  const down = await startFakeLambda();
  await down.close();
  const { code, record } = await runner(['--lambda-endpoint', down.url, ...FAST], { TransactionId: 'committed-c' });
  assert.equal(code, 3);
  assert.equal(record.error, 'Lambda.ServiceException');
  assert.match(record.cause, /ECONNREFUSED/);
  assert.equal(record.taskCalls, 7);
  assert.equal(record.historyEvents, 2 + 1 + 3 * 7);
  assert.ok(record.durationMs < 3000, `took ${record.durationMs} ms`);
});

test('a placeholder without a value is a usage error; --sub gives it one', async () => {
  const definition = join(mkdtempSync(join(tmpdir(), 'sfn-local-')), 'asl.json');
  writeFileSync(definition, readFileSync(DEFINITION, 'utf8').replace('${BeginFunctionArn}', '${BeginArn}'));
  const missing = await run('committed-d', ...FAST, '--definition', definition);
  assert.equal(missing.code, 1);
  assert.equal(missing.record, null);
  assert.match(missing.stderr, /placeholder \$\{BeginArn\} has no value/);
  const given = await run('committed-d', ...FAST, '--definition', definition, '--sub', 'BeginArn=arn:aws:lambda:us-east-1:000000000000:function:saga-begin');
  assert.equal(given.code, 0, given.stderr);
});

test('a definition asl-validator refuses is refused on every run; one it passes is recorded once, by its content', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sfn-local-'));
  const broken = join(dir, 'broken.asl.json');
  const parsed = JSON.parse(readFileSync(DEFINITION, 'utf8'));
  parsed.StartAt = 'NoSuchState';
  writeFileSync(broken, JSON.stringify(parsed));
  for (let attempt = 1; attempt <= 2; attempt++) {
    const { code, record, stderr } = await run('committed-e', ...FAST, '--definition', broken);
    assert.equal(code, 1, `attempt ${attempt}: ${stderr}`);
    assert.equal(record, null);
    assert.match(stderr, /State machine definition is invalid/, `attempt ${attempt}`);
  }
  assert.equal(callsOf('committed-e').length, 0);
  // A definition of its own, new to the record: the first run checks it and records the verdict, the second finds it.
  const renamed = join(dir, 'renamed.asl.json');
  parsed.StartAt = JSON.parse(readFileSync(DEFINITION, 'utf8')).StartAt;
  parsed.Comment = `${parsed.Comment ?? ''} (${dir})`;
  writeFileSync(renamed, JSON.stringify(parsed));
  const stamps = () => (existsSync(VALIDATED) ? readdirSync(VALIDATED) : []);
  const before = new Set(stamps());
  for (let attempt = 1; attempt <= 2; attempt++) {
    const { code, stderr } = await run(`committed-f${attempt}`, ...FAST, '--definition', renamed);
    assert.equal(code, 0, `attempt ${attempt}: ${stderr}`);
    assert.equal(stamps().length, before.size + 1, `attempt ${attempt}`);
  }
  for (const stamp of stamps().filter((s) => !before.has(s))) rmSync(join(VALIDATED, stamp));
});

// --serve: one runner for many executions, as the test harness (tests/src/stack.rs) keeps one per test process.
function server() {
  const child = spawn(process.execPath, [RUNNER, '--serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const waiting = new Map();
  const answered = [];
  let pending = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    pending += d;
    for (let end = pending.indexOf('\n'); end >= 0; end = pending.indexOf('\n')) {
      const reply = JSON.parse(pending.slice(0, end));
      pending = pending.slice(end + 1);
      answered.push(reply.id);
      waiting.get(reply.id)?.(reply);
      waiting.delete(reply.id);
    }
  });
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return {
    child,
    answered,
    exited,
    stderr: () => stderr,
    send: (line) => child.stdin.write(`${line}\n`),
    ask: (id, args, input) =>
      new Promise((resolve) => {
        waiting.set(id, resolve);
        child.stdin.write(`${JSON.stringify({ id, args, input })}\n`);
      }),
  };
}

const comparable = ({ status, output, error, transitions, stateEntries, historyEvents, taskCalls }) =>
  ({ status, output: output && { ...output, TransactionId: undefined }, error, transitions, stateEntries, historyEvents, taskCalls });

test('--serve runs executions side by side in one process, each answered by its id as a run of its own would be', async () => {
  const srv = server();
  const args = ['--lambda-endpoint', fake.url, ...FAST, '--quiet'];
  const [committed, canceled, retried] = await Promise.all([
    srv.ask('c', args, { TransactionId: 'committed-s1' }),
    srv.ask('x', args, { TransactionId: 'canceled-s1' }),
    srv.ask('r', args, { TransactionId: 'retry-s1' }),
  ]);
  srv.child.stdin.end();
  assert.deepEqual(await srv.exited, { code: 0, signal: null });
  assert.equal(srv.stderr(), '');
  assert.deepEqual([committed.id, canceled.id, retried.id], ['c', 'x', 'r']);
  assert.deepEqual([committed.code, canceled.code, retried.code], [0, 3, 0]);
  assert.equal(canceled.record.cause, JSON.stringify({ errorType: 'TransactionCanceled', errorMessage: cancellationCause('canceled-s1') }));
  for (const [served, txId] of [[committed, 'committed-s2'], [canceled, 'canceled-s2'], [retried, 'retry-s2']]) {
    const alone = await run(txId, ...FAST);
    assert.deepEqual(comparable(served.record), comparable(alone.record), txId);
    assert.match(served.record.executionArn, /:execution:dynamo-saga-transaction:local-[0-9a-f-]{36}$/);
  }
  // Side by side: each execution's first call came before the other two's last.
  const calls = (txId) => fake.calls.map((c, i) => [c, i]).filter(([c]) => (c.input?.TransactionId ?? c.input?.Request?.TransactionId) === txId).map(([, i]) => i);
  const spans = ['committed-s1', 'canceled-s1', 'retry-s1'].map((tx) => [Math.min(...calls(tx)), Math.max(...calls(tx))]);
  for (const [first] of spans) for (const [, last] of spans) assert.ok(first < last, JSON.stringify(spans));
});

test('--serve answers a bad request with its usage error, ignores a line without an id, and goes on serving', async () => {
  const srv = server();
  for (const line of ['null', '[1]', 'not json', '{"args": []}']) srv.send(line);
  const bogus = await srv.ask(1, ['--bogus'], {});
  assert.equal(bogus.code, 1);
  assert.match(bogus.error, /Unknown option '--bogus'/);
  const withInput = await srv.ask(2, ['--lambda-endpoint', fake.url, '--input', 'in.json'], {});
  assert.deepEqual([withInput.code, withInput.error], [1, '--input is not taken by --serve: a request carries its input']);
  const noArgs = await srv.ask(3, undefined, {});
  assert.deepEqual([noArgs.code, noArgs.error], [1, 'a request needs "args", a list of options']);
  const good = await srv.ask(4, ['--lambda-endpoint', fake.url, ...FAST, '--quiet'], { TransactionId: 'committed-s3' });
  assert.equal(good.code, 0);
  assert.equal(good.record.output.State, 'COMMITTED');
  srv.child.stdin.end();
  assert.equal((await srv.exited).code, 0);
  assert.equal(callsOf('committed-s3').length, 13);
  assert.deepEqual(srv.answered, [1, 2, 3, 4]);
  assert.equal(srv.stderr().match(/a line that is not a JSON object with an id is ignored/g)?.length, 4, srv.stderr());
});

test('--serve: when stdin closes, the executions under way run to their end, then the runner exits', async () => {
  const srv = server();
  const reply = srv.ask('p', ['--lambda-endpoint', fake.url, '--wait-ms', '300', '--retry-ms', '5', '--quiet'], { TransactionId: 'patient-s4' });
  while (callsOf('patient-s4').length === 0) await new Promise((r) => setTimeout(r, 10));
  srv.child.stdin.end();
  const { code, record } = await reply;
  assert.equal(code, 0);
  assert.equal(record.output.Waits, 3);
  assert.equal(callsOf('patient-s4').at(-1).fn, 'saga-release');
  assert.deepEqual(await srv.exited, { code: 0, signal: null });
});

test('--serve: SIGTERM aborts the executions under way, answers each ABORTED, and exits 143', async () => {
  const srv = server();
  const args = ['--lambda-endpoint', fake.url, '--wait-ms', '5000', '--quiet'];
  const replies = [srv.ask(1, args, { TransactionId: 'patient-s5' }), srv.ask(2, args, { TransactionId: 'contended-s5' })];
  while (callsOf('patient-s5').length < 2 || callsOf('contended-s5').length < 2) await new Promise((r) => setTimeout(r, 10));
  srv.child.kill('SIGTERM');
  for (const { code, record } of await Promise.all(replies)) {
    assert.equal(code, 143);
    assert.equal(record.status, 'ABORTED');
  }
  assert.equal((await srv.exited).code, 143);
  assert.equal(callsOf('patient-s5').length, 2);
});

test('--serve: SIGTERM while the package still loads aborts the execution asked for', async () => {
  // The signal has to land after Node has started the runner (before that it simply kills the process) and while the
  // package loads, a few hundred milliseconds: started a tenth of a second after the request, later if that was early.
  for (let delay = 100; ; delay += 100) {
    const srv = server();
    const tx = `patient-s6-${delay}`;
    const reply = srv.ask(1, ['--lambda-endpoint', fake.url, '--wait-ms', '3000', '--quiet'], { TransactionId: tx });
    await new Promise((r) => setTimeout(r, delay));
    srv.child.kill('SIGTERM');
    const signalled = Date.now();
    const ended = await Promise.race([reply, srv.exited.then(() => undefined)]);
    const exited = await srv.exited;
    if (exited.signal === 'SIGTERM') {
      assert.ok(delay < 1000, 'every SIGTERM landed before the runner had started');
      continue;
    }
    const { code, record } = ended ?? (await reply);
    assert.equal(code, 143);
    assert.equal(record.status, 'ABORTED');
    assert.equal(exited.code, 143);
    assert.ok(Date.now() - signalled < 2500, `took ${Date.now() - signalled} ms`);
    assert.deepEqual(srv.answered, [1]);
    assert.ok(callsOf(tx).length <= 2, JSON.stringify(callsOf(tx).map((c) => c.fn)));
    break;
  }
});
