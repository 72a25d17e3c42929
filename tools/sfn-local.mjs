#!/usr/bin/env node
// Runs one execution of the real state machine definition locally (aws-local-stepfunctions 3.0.0), with every Task
// invoking its Lambda on a local Invoke API endpoint such as `cargo lambda watch`.
//
//   node tools/sfn-local.mjs --lambda-endpoint http://127.0.0.1:PORT --input FILE|- \
//     [--definition statemachine/transaction.asl.json] [--wait-ms N] [--retry-ms N] [--quiet] [--name NAME] [--sub Key=Value ...]
//   node tools/sfn-local.mjs --serve
//
//   --lambda-endpoint  base URL; a Task whose Resource is ...:function:NAME POSTs its input to
//                      URL/2015-03-31/functions/NAME/invocations
//   --input            execution input, a JSON file or - for stdin
//   --definition       default: statemachine/transaction.asl.json of this repository
//   --wait-ms N        every Wait state waits N ms instead of its seconds
//   --retry-ms N       every Retry pause is N ms instead of IntervalSeconds/BackoffRate/jitter
//   --sub Key=Value    sets ${Key}; ${<Phase>FunctionArn} defaults to arn:aws:lambda:us-east-1:000000000000:function:
//                      saga-<phase>, as DefinitionSubstitutions would; any other ${...} left over is an error
//   --quiet            no progress lines on stderr
//   --name NAME        the execution's name (default local-<uuid>), as StartExecution's name
//
// SAGA_CALL_LOG, when set, names a file each Task's Lambda invocation is appended to as one JSON line, the call the
// state machine's role makes: {"principal": "state-machine", "service": "lambda", "operation": "Invoke", "requests":
// [{"action": "lambda:InvokeFunction", "resource": "function:<name>"}]} (tools/iam/sim.mjs evaluates the log).
//
// stdout: one JSON object {status, output, error, cause, transitions, stateEntries (state name -> times entered),
// historyEvents, taskCalls, taskMs (function name -> the duration of each of its invocations, in ms), durationMs,
// executionArn}; the Context Object's $$.Execution.Id is that made-up ARN (execution name local-<uuid>).
// Exit code: 0 SUCCEEDED, 3 FAILED, 1 usage or runner error, 130/143 ABORTED by SIGINT/SIGTERM.
//
// --serve runs any number of executions, side by side, in one process: each line on stdin is a request
// {"id": ID, "args": [the options above, --input left out], "input": the execution input}, and each execution's end is
// a line on stdout {"id": ID, "code": the exit code above, "record": the object above} or, for a usage error,
// {"id": ID, "code": 1, "error": MESSAGE}, in the order they end; a line that is not a JSON object with an id is
// ignored, with a note on stderr. A process loads the package and its modules in about
// half a second of CPU, more than most executions take: a test harness keeps one runner for all its executions. When
// stdin closes, the executions under way run to their end and the runner exits 0; SIGINT or SIGTERM aborts them.
// The package is installed into .local/sfn by tools/sfn-local-install.sh, which this runs when it is missing.
import { spawnSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const PACKAGE_DIR = join(ROOT, '.local/sfn/node_modules/aws-local-stepfunctions');
const PACKAGE_VERSION = '3.0.0';
const DEFAULT_DEFINITION = join(ROOT, 'statemachine/transaction.asl.json');
const VALIDATED_DIR = join(ROOT, '.local/sfn/validated');
const DEFAULT_ARN_PREFIX = 'arn:aws:lambda:us-east-1:000000000000:function:saga-';
const STATE_MACHINE_NAME = 'dynamo-saga-transaction';
const STATE_MACHINE_ARN = `arn:aws:states:us-east-1:000000000000:stateMachine:${STATE_MACHINE_NAME}`;
const EXIT = { SUCCEEDED: 0, FAILED: 3, USAGE: 1 };
const SIGNAL_EXIT = { SIGINT: 130, SIGTERM: 143 };

class UsageError extends Error {}

// The error a Task sees: `name` is what Retry/Catch match (Error), `message` is what a Catch puts in Cause.
class TaskError extends Error {
  constructor(name, cause) {
    super(cause);
    this.name = name;
  }
}

function parseCli(argv, { served = false } = {}) {
  const { values } = parseArgs({
    args: argv,
    options: {
      'lambda-endpoint': { type: 'string' },
      input: { type: 'string' },
      definition: { type: 'string', default: DEFAULT_DEFINITION },
      'wait-ms': { type: 'string' },
      'retry-ms': { type: 'string' },
      quiet: { type: 'boolean', default: false },
      name: { type: 'string' },
      sub: { type: 'string', multiple: true, default: [] },
    },
  });
  if (!values['lambda-endpoint']) throw new UsageError('--lambda-endpoint is required');
  if (served && values.input !== undefined) throw new UsageError('--input is not taken by --serve: a request carries its input');
  if (!served && !values.input) throw new UsageError('--input FILE|- is required');
  const subs = {};
  for (const s of values.sub) {
    const eq = s.indexOf('=');
    if (eq < 1) throw new UsageError(`--sub ${s}: expected Key=Value`);
    subs[s.slice(0, eq)] = s.slice(eq + 1);
  }
  return {
    endpoint: values['lambda-endpoint'].replace(/\/+$/, ''),
    input: values.input,
    definition: values.definition,
    waitMs: millis('--wait-ms', values['wait-ms']),
    retryMs: millis('--retry-ms', values['retry-ms']),
    quiet: values.quiet,
    name: values.name,
    subs,
  };
}

function millis(flag, value) {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`${flag} ${value}: expected a whole number of milliseconds`);
  return Number(value);
}

function readJson(path, what) {
  let text;
  try {
    text = path === '-' ? readFileSync(0, 'utf8') : readFileSync(path, 'utf8');
  } catch (e) {
    throw new UsageError(`cannot read ${what} ${path}: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${what} ${path} is not JSON: ${e.message}`);
  }
}

// Fills ${...} in every string of the parsed definition, as SAM's DefinitionSubstitutions do at deploy time; working
// on the parsed JSON keeps a value with quotes from breaking the document.
function substitute(node, subs) {
  if (typeof node === 'string') {
    return node.replace(/\$\{([^}]*)\}/g, (whole, key) => {
      if (key in subs) return subs[key];
      const phase = /^([A-Z][A-Za-z0-9]*)FunctionArn$/.exec(key);
      if (phase) return DEFAULT_ARN_PREFIX + phase[1].toLowerCase();
      throw new UsageError(`definition placeholder ${whole} has no value (add --sub ${key}=...)`);
    });
  }
  if (Array.isArray(node)) return node.map((n) => substitute(n, subs));
  if (node && typeof node === 'object') {
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, substitute(v, subs)]));
  }
  return node;
}

function allStates(definition) {
  const out = [];
  for (const [name, state] of Object.entries(definition.States ?? {})) {
    out.push([name, state]);
    for (const branch of state.Branches ?? []) out.push(...allStates(branch));
    for (const nested of [state.Iterator, state.ItemProcessor]) if (nested) out.push(...allStates(nested));
  }
  return out;
}

function functionName(stateName, resource) {
  const parts = String(resource).split(':');
  if (parts.length < 7 || parts[2] !== 'lambda' || parts[5] !== 'function') {
    throw new UsageError(`Task ${stateName}: Resource ${resource} is not a Lambda function ARN`);
  }
  return parts[6];
}

// Turns one Invoke API response into the Task's result, or into the error Step Functions would report. A function
// error arrives from real Lambda as 200 with X-Amz-Function-Error, and from cargo lambda watch as a bare 500; either
// way Error is the payload's errorType and Cause is the payload text, unchanged.
function taskResult(status, functionError, body) {
  let payload;
  try {
    payload = body === '' ? null : JSON.parse(body);
  } catch {
    payload = undefined;
  }
  const errorType = typeof payload?.errorType === 'string' ? payload.errorType : undefined;
  if (functionError || (status === 500 && errorType)) {
    throw new TaskError(errorType ?? 'Lambda.Unknown', body);
  }
  if (status >= 200 && status < 300) {
    if (payload === undefined) throw new TaskError('States.Runtime', `the function returned a result that is not JSON: ${body.slice(0, 200)}`);
    return payload;
  }
  const cause = `Invoke returned HTTP ${status}: ${body.slice(0, 500)}`;
  // What the Lambda service answers for these; anything else counts as the service failing.
  if (status === 404) throw new TaskError('Lambda.ResourceNotFoundException', cause);
  if (status === 429) throw new TaskError('Lambda.TooManyRequestsException', cause);
  if (status === 408) throw new TaskError('Sandbox.Timedout', cause);
  throw new TaskError('Lambda.ServiceException', cause);
}

// One line of the call log (SAGA_CALL_LOG): the state machine's role invoking a Task's function. Appended whole in one
// write, so lines from concurrent executions and the functions do not interleave.
function recordInvoke(fnName) {
  const path = process.env.SAGA_CALL_LOG;
  if (!path) return;
  const call = { principal: 'state-machine', service: 'lambda', operation: 'Invoke', requests: [{ action: 'lambda:InvokeFunction', resource: `function:${fnName}` }] };
  appendFileSync(path, `${JSON.stringify(call)}\n`);
}

// One POST through node:http rather than fetch: Node 20 compiles fetch's undici on first use, about a fifth of a
// second of CPU in every process, and a run of its own is a process per execution.
function post(url, body, signal) {
  return new Promise((resolve, reject) => {
    const send = url.startsWith('https:') ? httpsRequest : httpRequest;
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    const req = send(url, { method: 'POST', headers, signal }, (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () =>
        resolve({ status: res.statusCode, functionError: res.headers['x-amz-function-error'], body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function makeInvoker(endpoint, fnName, timeoutMs, runAbort, stats) {
  const url = `${endpoint}/2015-03-31/functions/${encodeURIComponent(fnName)}/invocations`;
  return async (input) => {
    if (runAbort.signal.aborted) throw new TaskError('States.Runtime', 'execution aborted');
    stats.taskCalls++;
    recordInvoke(fnName);
    const callStarted = Date.now();
    // The package gives up on a Task after its TimeoutSeconds but does not cancel it; cancel the request too.
    const signal = AbortSignal.any([runAbort.signal, AbortSignal.timeout(timeoutMs)]);
    let res;
    try {
      res = await post(url, JSON.stringify(input), signal);
      (stats.taskMs[fnName] ??= []).push(Date.now() - callStarted);
    } catch (e) {
      // An abort carries the signal's reason (the timeout, or the execution's abort) as its cause.
      const reason = e.name === 'AbortError' ? e.cause?.message ?? e.message : e.code ?? e.message;
      throw new TaskError('Lambda.ServiceException', `Invoke ${url} failed: ${reason}`);
    }
    return taskResult(res.status, res.functionError, res.body);
  };
}

async function loadPackage() {
  const manifest = join(PACKAGE_DIR, 'package.json');
  const installed = existsSync(manifest) ? JSON.parse(readFileSync(manifest, 'utf8')).version : undefined;
  if (installed !== PACKAGE_VERSION) {
    const r = spawnSync('bash', [join(ROOT, 'tools/sfn-local-install.sh')], { stdio: ['ignore', 2, 2] });
    if (r.status !== 0) throw new Error('tools/sfn-local-install.sh failed');
  }
  // Node 20 lacks Promise.withResolvers, which the package calls for every Task (it targets Node 22).
  if (!Promise.withResolvers) {
    Promise.withResolvers = function withResolvers() {
      let resolve;
      let reject;
      const promise = new this((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    };
  }
  return import(pathToFileURL(join(PACKAGE_DIR, 'build/main.node.esm.js')).href);
}

function progress(quiet, started) {
  if (quiet) return () => {};
  return (timestamp, state, text) => {
    const t = `${((timestamp - started) / 1000).toFixed(1)}s`.padStart(7);
    process.stderr.write(`${t} ${state.padEnd(9)} ${text}`.trimEnd() + '\n');
  };
}

function describeResult(out) {
  if (!out || typeof out !== 'object') return JSON.stringify(out);
  const parts = [];
  if (out.Batch !== undefined || out.Batches !== undefined) parts.push(`batch ${out.Batch ?? '?'}/${out.Batches ?? '?'}`);
  if (out.State) parts.push(out.State);
  if (out.Actions !== undefined) parts.push(`${out.Actions} actions`);
  if (out.Step) parts.push(`-> ${out.Step}${out.Step === 'Wait' && out.WaitSeconds !== undefined ? ` ${out.WaitSeconds}s` : ''}`);
  return parts.join('  ');
}

function describeError(name, cause) {
  let message = typeof cause === 'string' ? cause : JSON.stringify(cause);
  try {
    const parsed = JSON.parse(message);
    if (typeof parsed?.errorMessage === 'string') message = parsed.errorMessage;
  } catch {
    // A cause that is not a Lambda error payload is shown as it is.
  }
  message = message.replace(/\s+/g, ' ');
  return `${name}: ${message.length > 160 ? `${message.slice(0, 157)}...` : message}`;
}

// History events of a Standard execution, counted from the package's event log the way Step Functions writes them:
//   ExecutionStarted and the closing ExecutionSucceeded/Failed/Aborted               2
//   every state entered (TaskStateEntered, ChoiceStateEntered, WaitStateEntered...)  1 per StateEntered
//   every state exited normally or through a Catch (the package reports a Catch as   1 per StateExited
//     StateCaught then StateExited; Fail states and uncaught errors never exit)
//   every Lambda attempt: LambdaFunctionScheduled, LambdaFunctionStarted and         3 per attempt; attempts are
//     LambdaFunctionSucceeded/Failed/TimedOut                                          Task entries + StateRetried
// This matches the budget in the definition's Comment (a phase call costs Task 5 + Route 2, a retried attempt 3).
function historyEvents(counts) {
  return 2 + counts.entered + counts.exited + 3 * (counts.taskEntered + counts.retried);
}

// The package checks a definition with asl-validator before it runs it: about a second of CPU, more than most
// executions take. The verdict depends only on the definition and the package, so a definition that passed is
// recorded (a file named by the hash of both in .local/sfn/validated) and not checked again; one that fails is
// checked, and refused, every time.
function newStateMachine(StateMachine, definition) {
  const hash = createHash('sha256').update(`aws-local-stepfunctions@${PACKAGE_VERSION}\n`).update(JSON.stringify(definition));
  const stamp = join(VALIDATED_DIR, hash.digest('hex'));
  const validated = existsSync(stamp);
  const machine = new StateMachine(definition, { validationOptions: { noValidate: validated } });
  if (!validated) {
    mkdirSync(VALIDATED_DIR, { recursive: true });
    writeFileSync(stamp, '');
  }
  return machine;
}

// Runs one execution to its end. `onAbort(abort)` hands the caller the function that aborts it, given the signal's name.
async function run(opts, input, onAbort) {
  // Registered before anything is awaited: an abort while the package loads still aborts the execution.
  let abortedBy;
  let execution;
  const runAbort = new AbortController();
  onAbort((sig) => {
    abortedBy = sig;
    runAbort.abort();
    execution?.abort();
  });
  const rawDefinition = readJson(opts.definition, 'definition');
  const definition = substitute(rawDefinition, opts.subs);
  const { StateMachine, ExecutionAbortedError, ExecutionError, ExecutionTimeoutError } = await loadPackage();

  let machine;
  try {
    machine = newStateMachine(StateMachine, definition);
  } catch (e) {
    throw new UsageError(e.message);
  }

  const stats = { taskCalls: 0, taskMs: {} };
  const taskResourceLocalHandlers = {};
  const retryIntervalOverrides = {};
  const waitTimeOverrides = {};
  const stateTypes = {};
  for (const [name, state] of allStates(definition)) {
    stateTypes[name] = state.Type;
    if (state.Type === 'Task') {
      const timeoutMs = (state.TimeoutSeconds ?? 60) * 1000;
      taskResourceLocalHandlers[name] = makeInvoker(opts.endpoint, functionName(name, state.Resource), timeoutMs, runAbort, stats);
    }
    if (state.Retry && opts.retryMs !== undefined) retryIntervalOverrides[name] = opts.retryMs;
    if (state.Type === 'Wait' && opts.waitMs !== undefined) waitTimeOverrides[name] = opts.waitMs;
  }

  // The package fills in only Execution.Input and StartTime; the rest is what AWS would put in the Context Object.
  const executionName = opts.name ?? `local-${randomUUID()}`;
  const executionArn = `arn:aws:states:us-east-1:000000000000:execution:${STATE_MACHINE_NAME}:${executionName}`;
  const context = {
    Execution: { Id: executionArn, Name: executionName, RoleArn: 'arn:aws:iam::000000000000:role/local', RedriveCount: 0 },
    StateMachine: { Id: STATE_MACHINE_ARN, Name: STATE_MACHINE_NAME },
  };

  const started = Date.now();
  const log = progress(opts.quiet, started);
  log(started, 'Start', executionArn);
  execution = machine.run(input, {
    overrides: { taskResourceLocalHandlers, retryIntervalOverrides, waitTimeOverrides },
    context,
  });
  if (abortedBy) execution.abort();

  const counts = { entered: 0, exited: 0, taskEntered: 0, retried: 0 };
  const stateEntries = {};
  const lastError = {};
  const consumeEvents = (async () => {
    for await (const ev of execution.eventLogs) {
      const name = ev.state?.name;
      switch (ev.type) {
        case 'StateEntered':
          counts.entered++;
          stateEntries[name] = (stateEntries[name] ?? 0) + 1;
          if (ev.state.type === 'Task') counts.taskEntered++;
          if (ev.state.type === 'Wait') {
            const seconds = definition.States[name]?.Seconds ?? ev.state.input?.WaitSeconds;
            const holder = ev.state.input?.Contention?.Holder;
            const planned = seconds === undefined ? '' : `${seconds}s`;
            const actual = opts.waitMs === undefined ? planned : `${opts.waitMs}ms (instead of ${planned || 'its time'})`;
            log(ev.timestamp, name, `wait ${actual}${holder ? `, held by ${holder}` : ''}`);
          }
          break;
        case 'StateExited':
          counts.exited++;
          if (ev.state.type === 'Task' && !lastError[name]) log(ev.timestamp, name, describeResult(ev.state.output));
          delete lastError[name];
          break;
        case 'StateFailed':
          if (stateTypes[name] === 'Task') {
            lastError[name] = ev.Error;
            log(ev.timestamp, name, `failed: ${describeError(ev.Error, ev.Cause)}`);
          }
          break;
        case 'StateRetried': {
          counts.retried++;
          const max = ev.retry.retrier.MaxAttempts ?? 3;
          log(ev.timestamp, name, `retry ${ev.retry.attempt}/${max} after ${lastError[name] ?? 'error'}`);
          delete lastError[name];
          break;
        }
        case 'StateCaught':
          log(ev.timestamp, name, `caught ${lastError[name] ?? 'error'} -> ${ev.catch.catcher.Next}`);
          break;
        case 'ExecutionSucceeded':
          log(ev.timestamp, 'SUCCEEDED', '');
          break;
        case 'ExecutionFailed':
          log(ev.timestamp, 'FAILED', describeError(ev.Error, ev.Cause));
          break;
        case 'ExecutionAborted':
          log(ev.timestamp, 'ABORTED', '');
          break;
        default:
          break;
      }
    }
  })();

  const result = { status: 'SUCCEEDED', output: null, error: null, cause: null };
  try {
    result.output = await execution.result;
  } catch (e) {
    if (e instanceof ExecutionAbortedError) {
      result.status = 'ABORTED';
    } else if (e instanceof ExecutionError) {
      result.status = 'FAILED';
      result.error = e.cause?.name ?? 'States.Runtime';
      result.cause = e.cause?.message ?? null;
    } else if (e instanceof ExecutionTimeoutError) {
      result.status = 'FAILED';
      result.error = 'States.Timeout';
    } else {
      throw e;
    }
  }
  await consumeEvents;
  return {
    code: abortedBy ? SIGNAL_EXIT[abortedBy] : EXIT[result.status] ?? EXIT.FAILED,
    record: {
      ...result,
      transitions: counts.entered,
      stateEntries,
      historyEvents: historyEvents(counts),
      taskCalls: stats.taskCalls,
      taskMs: stats.taskMs,
      durationMs: Date.now() - started,
      executionArn,
    },
  };
}

function finish(code, record) {
  // Exits explicitly: after an abort the package may still be finishing the state it was in.
  process.stdout.write(`${JSON.stringify(record)}\n`, () => process.exit(code));
}

const isUsageError = (e) => e instanceof UsageError || e.code?.startsWith?.('ERR_PARSE_ARGS');

// --serve: one execution per request line, run side by side; see the head of this file.
async function serve() {
  const running = new Set();
  const aborts = new Set();
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  // The signal that stops the runner: the executions under way are aborted, and no request is read after it.
  let stopping;
  for (const sig of Object.keys(SIGNAL_EXIT)) {
    process.once(sig, () => {
      stopping = sig;
      for (const abort of aborts) abort(sig);
      lines.close();
    });
  }
  // A caller that has gone no longer reads the answers; the executions still run to their end.
  process.stdout.on('error', () => {});
  const answer = (reply) => process.stdout.write(`${JSON.stringify(reply)}\n`);
  for await (const line of lines) {
    if (stopping) break;
    if (line.trim() === '') continue;
    let request;
    try {
      request = JSON.parse(line);
    } catch {
      request = undefined;
    }
    if (request === null || typeof request !== 'object' || Array.isArray(request) || request.id === undefined) {
      process.stderr.write(`sfn-local: a line that is not a JSON object with an id is ignored: ${line.slice(0, 200)}\n`);
      continue;
    }
    const { id } = request;
    const execution = (async () => {
      let abort;
      const onAbort = (a) => {
        abort = a;
        if (stopping) a(stopping);
        else aborts.add(a);
      };
      try {
        if (!Array.isArray(request.args)) throw new UsageError('a request needs "args", a list of options');
        const opts = parseCli(request.args.map(String), { served: true });
        const { code, record } = await run(opts, request.input ?? null, onAbort);
        answer({ id, code, record });
      } catch (e) {
        if (!isUsageError(e)) process.stderr.write(`sfn-local: ${e.stack}\n`);
        answer({ id, code: EXIT.USAGE, error: e.message });
      } finally {
        aborts.delete(abort);
      }
    })();
    running.add(execution);
    execution.finally(() => running.delete(execution));
  }
  await Promise.allSettled(running);
  process.stdout.write('', () => process.exit(stopping ? SIGNAL_EXIT[stopping] : 0));
}

async function runOnce(argv) {
  const opts = parseCli(argv);
  const input = readJson(opts.input, 'input');
  const { code, record } = await run(opts, input, (abort) => {
    for (const sig of Object.keys(SIGNAL_EXIT)) process.once(sig, () => abort(sig));
  });
  finish(code, record);
}

try {
  const argv = process.argv.slice(2);
  if (argv.includes('--serve')) {
    if (argv.length !== 1) throw new UsageError('--serve takes no other option: each request carries its own');
    await serve();
  } else {
    await runOnce(argv);
  }
} catch (e) {
  const usage = isUsageError(e);
  process.stderr.write(`sfn-local: ${usage ? e.message : e.stack}\n`);
  if (usage) process.stderr.write('usage: node tools/sfn-local.mjs --lambda-endpoint URL --input FILE|- [--definition FILE] [--wait-ms N] [--retry-ms N] [--quiet] [--name NAME] [--sub Key=Value ...]\n       node tools/sfn-local.mjs --serve\n');
  process.exit(EXIT.USAGE);
}
