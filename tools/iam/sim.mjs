#!/usr/bin/env node
// Evaluates every AWS call the suites made (and the calls that never run locally) against the IAM policies the template
// deploys, with a real IAM policy evaluator (@cloud-copilot/iam-simulate, pinned in tools/iam/package.json).
//
//   node tools/iam/sim.mjs --resolved FILE --log FILE [--log FILE ...] [--local-tx-table NAME]
//     [--local-state-machine NAME ...] [--local-queue NAME] [--docs docs/iam.md] [--expect-denied TEXT ...] [--json FILE]
//     [--quiet]
//
//   --resolved    the output of tools/iam/resolve.py: each configuration's policies, resource policies and names
//   --log         a call log, one JSON object a line (see below); several are read as one
//   --strong-log  a call log of stacks in MRSC mode (SAGA_MULTI_REGION_CONSISTENCY=strong): evaluated in the
//                 configurations with MultiRegionConsistency STRONG only, beside the --log calls
//   --local-tx-table       the functions' local SAGA_TABLE (default saga-transactions; may be given for each
//                          stack): calls on it are calls on the deployed transactions table
//   --caller-tx-tables RE  the transactions tables tests make for the library in process (default ^t-.*-tx$,
//                          tests/src/lib.rs): a "caller" call on one is a call on the deployed TransactionsTable
//   --local-state-machine  a local state machine name (default dynamo-saga-local, dynamo-saga-transaction, bench):
//                          calls on it or its executions are calls on the deployed state machine
//   --local-queue NAME     the local dead-letter queue (default saga-events-dead-letters, tools/stack.sh): a call on it
//                          is a call on the deployed queue the calling function's SAGA_DEAD_LETTER_QUEUE_URL names
//   --docs        docs/iam.md: the table of unused permissions that stay, with why (between <!-- unused:begin -->
//                 and <!-- unused:end -->)
//   --policies    policies/: the callers' policies docs/iam.md gives, one NAME.json each
//   --expect-denied TEXT   self-test: succeed only if some denied call's line contains TEXT (and every TEXT is met)
//   --denials-only         unused permissions without a justification are listed but do not fail the run (for a log
//                          that does not hold every principal's calls)
//   --json FILE   also write the whole report as JSON
//
// A call log line: {"principal": "saga-lock", "service": "dynamodb", "operation": "UpdateItem",
//   "requests": [{"action": "dynamodb:UpdateItem", "resource": "table/t-abc"}]}
// principal: a function's binary in the local stack (its template Handler), "state-machine" (the state machine's
// role invoking a Task's function), or "caller" (the library or CLI in a user's process, held to the docs' policies
// "caller-in-process", "caller-state-machine" and "caller-stack" together). resource: the ARN after the account (an SQS queue: its
// name); the service, partition, Region and account are added (arn:aws:<service of the action>:<Region>:<account>:
// <resource>), local names mapped to deployed ones.
//
// Calls that never run locally are added from the template (synthetic, each citing the AWS documentation that says
// the call is made): API Gateway invoking the API's functions, EventBridge invoking the sweeper and the events
// function (and the rule's dead-letter queue, and the failed-executions log), Lambda sending an asynchronous event it
// gave up on to the function's dead-letter queue, Lambda writing each function's logs and traces, Step Functions' log
// delivery and traces, each service assuming its role, and, against the docs' caller policies, the API callers'
// execute-api:Invoke, the EventBridge senders' events:PutEvents (each source also matched against the rule's
// pattern), the CLI's calls through the state machine and through a stack, and its reads. A few synthetic calls must
// be denied (a team's PutEvents policy and another team's source): one that is allowed fails the run.
//
// Exit code: 0 every call allowed (and every call that must be denied denied) in every configuration and every unused
// permission justified in the docs; 1 otherwise (each denial names the configuration, principal, action, ARN and why);
// 2 usage or input errors.
import { createReadStream, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const PACKAGE = join(ROOT, '.local/iam-sim/node_modules/@cloud-copilot/iam-simulate/dist/esm/index.js');
const MANAGED = JSON.parse(readFileSync(join(ROOT, 'tools/iam/managed-policies.json'), 'utf8'));

class InputError extends Error {}

// The evaluator's explains give one match as an object and several as a list.
const list = (x) => (x === undefined || x === null ? [] : [x].flat());

// ---------------------------------------------------------------- arguments and inputs

function cli(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      resolved: { type: 'string' },
      log: { type: 'string', multiple: true, default: [] },
      'strong-log': { type: 'string', multiple: true, default: [] },
      'local-tx-table': { type: 'string', multiple: true },
      'caller-tx-tables': { type: 'string', default: '^t-.*-tx$' },
      'local-state-machine': { type: 'string', multiple: true },
      'local-queue': { type: 'string', default: 'saga-events-dead-letters' },
      docs: { type: 'string', default: join(ROOT, 'docs/iam.md') },
      policies: { type: 'string', default: join(ROOT, 'policies') },
      'expect-denied': { type: 'string', multiple: true, default: [] },
      'denials-only': { type: 'boolean', default: false },
      json: { type: 'string' },
      quiet: { type: 'boolean', default: false },
    },
  });
  if (!values.resolved) throw new InputError('--resolved FILE is required');
  if (values.log.length === 0) throw new InputError('--log FILE is required');
  return {
    resolved: values.resolved,
    logs: values.log,
    strongLogs: values['strong-log'],
    localTxTables: values['local-tx-table'] ?? ['saga-transactions'],
    callerTxTables: new RegExp(values['caller-tx-tables']),
    localStateMachines: values['local-state-machine'] ?? ['dynamo-saga-local', 'dynamo-saga-transaction', 'bench'],
    localQueue: values['local-queue'],
    docs: values.docs,
    policies: values.policies,
    expectDenied: values['expect-denied'],
    denialsOnly: values['denials-only'],
    json: values.json,
    quiet: values.quiet,
  };
}

// The distinct recorded requests of the logs (a suite's log holds millions of lines, most of them repeats): read as a
// stream, each (principal, action, resource) kept once with its count and first line.
async function readLogs(paths) {
  const seen = new Map();
  let lines = 0;
  for (const path of paths) {
    const rl = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
    let i = 0;
    for await (const line of rl) {
      i++;
      if (!line.trim()) continue;
      lines++;
      let o;
      try {
        o = JSON.parse(line);
      } catch (e) {
        throw new InputError(`${path}:${i}: not JSON: ${e.message}`);
      }
      if (typeof o.principal !== 'string' || !Array.isArray(o.requests)) {
        throw new InputError(`${path}:${i}: a call needs "principal" and "requests"`);
      }
      for (const r of o.requests) {
        if (typeof r.action !== 'string' || !/^[a-z0-9-]+:[A-Za-z0-9]+$/.test(r.action) || typeof r.resource !== 'string') {
          throw new InputError(`${path}:${i}: a request needs "action" (service:Action) and "resource"`);
        }
        // The condition keys of a request IAM reads from its content (PutEvents' events:source, events:detail-type).
        if (r.context !== undefined && (typeof r.context !== 'object' || r.context === null || Array.isArray(r.context))) {
          throw new InputError(`${path}:${i}: a request's "context" is an object of condition keys`);
        }
        const k = `${o.principal}\u0000${r.action}\u0000${r.resource}\u0000${JSON.stringify(r.context ?? {})}`;
        const c = seen.get(k);
        if (c) c.count++;
        else seen.set(k, { principal: o.principal, action: r.action, resource: r.resource, operation: o.operation, where: `${path}:${i}`, count: 1, ...(r.context ? { context: r.context } : {}) });
      }
    }
  }
  return { calls: [...seen.values()], lines };
}

// IAM's wildcards in a Resource: * any run of characters, ? one.
function iamGlob(pattern) {
  return new RegExp(`^${pattern.split('').map((ch) => (ch === '*' ? '.*' : ch === '?' ? '.' : ch.replace(/[.+^${}()|[\]\\]/g, '\\$&'))).join('')}$`);
}

// docs/iam.md: the callers' policies and the justified unused permissions.
function readDocs(path, policiesDir) {
  const text = readFileSync(path, 'utf8');
  const policies = {};
  for (const file of readdirSync(policiesDir).filter((f) => f.endsWith('.json'))) {
    try {
      policies[file.slice(0, -'.json'.length)] = JSON.parse(readFileSync(join(policiesDir, file), 'utf8'));
    } catch (e) {
      throw new InputError(`${join(policiesDir, file)} is not JSON: ${e.message}`);
    }
  }
  const justified = [];
  const block = /<!-- unused:begin -->([\s\S]*?)<!-- unused:end -->/.exec(text);
  if (block) {
    for (const line of block[1].split('\n')) {
      const cells = line.split('|').slice(1, -1).map((c) => c.trim().replace(/^`|`$/g, ''));
      if (cells.length < 5 || cells[0] === 'Principal' || /^-+$/.test(cells[0])) continue;
      const [principal, statement, actions, resource, why] = cells;
      const row = `${principal} | ${statement} | ${actions.replace(/`/g, '')} | ${resource}`;
      for (const action of actions.split(',').map((a) => a.trim().replace(/^`|`$/g, ''))) {
        justified.push({ principal, statement, action, resource, why, row });
      }
    }
  }
  return { policies, justified };
}

// ---------------------------------------------------------------- names and ARNs

// A docs policy with its placeholders filled for the configuration: REGION, ACCOUNT_ID, TRANSACTIONS_TABLE,
// STATE_MACHINE_NAME, API_ID, STAGE, STACK_NAME, SWEEPER_FUNCTION (the sweeper function's name); a Resource entry
// naming ALLOWED_TABLE becomes one entry per allowed table.
function fillPolicy(doc, cfg) {
  const values = {
    REGION: cfg.region,
    ACCOUNT_ID: cfg.account,
    TRANSACTIONS_TABLE: cfg.transactionsTable.name,
    STATE_MACHINE_NAME: cfg.stateMachine.name,
    API_ID: cfg.api.id,
    STAGE: cfg.api.stage,
    STACK_NAME: cfg.stack,
    SWEEPER_FUNCTION: functionOf(cfg, 'saga-sweeper').name,
  };
  const names = Object.keys(values).join('|');
  const fill = (s) => s.replace(new RegExp(`\\b(${names})\\b`, 'g'), (k) => values[k]);
  const out = structuredClone(doc);
  for (const st of out.Statement) {
    const list = [st.Resource].flat();
    st.Resource = list.flatMap((r) => (r.includes('ALLOWED_TABLE') ? cfg.allowedTables.map((t) => fill(r.replace('ALLOWED_TABLE', t))) : [fill(r)]));
  }
  return out;
}

function arnOf(cfg, service, resource) {
  return `arn:${cfg.partition}:${service}:${cfg.region}:${cfg.account}:${resource}`;
}

// The function whose binary is `binary`.
function functionOf(cfg, binary) {
  const fn = Object.values(cfg.functions).find((f) => f.binary === binary);
  if (!fn) throw new InputError(`${cfg.config}: the template has no function of binary ${binary}`);
  return fn;
}

// The deployed ARN of a recorded request's resource.
function mapResource(cfg, opts, action, resource, principal) {
  const service = action.split(':')[0];
  const sm = cfg.stateMachine.name;
  let r = resource;
  if (service === 'dynamodb') {
    const m = /^table\/([^/]+)(\/.*)?$/.exec(r);
    if (!m) throw new InputError(`${action} on ${resource}: a DynamoDB resource is table/NAME[/index/INDEX]`);
    const ownTx = principal === 'caller' && opts.callerTxTables.test(m[1]);
    if (opts.localTxTables.includes(m[1]) || ownTx) r = `table/${cfg.transactionsTable.name}${m[2] ?? ''}`;
  } else if (service === 'states') {
    const m = /^(stateMachine|execution|express):([^:]+)(:.*)?$/.exec(r);
    if (!m) throw new InputError(`${action} on ${resource}: a Step Functions resource is stateMachine:NAME or execution:NAME:ID`);
    if (opts.localStateMachines.includes(m[2])) r = `${m[1]}:${sm}${m[3] ?? ''}`;
  } else if (service === 'lambda') {
    const m = /^function:([^:]+)(:[^:]+)?$/.exec(r);
    if (!m) throw new InputError(`${action} on ${resource}: a Lambda resource is function:NAME or function:NAME:QUALIFIER`);
    const fn = Object.values(cfg.functions).find((f) => f.binary === m[1]);
    if (fn) r = `function:${fn.name}${m[2] ?? ''}`;
    // The state machine invokes what its DefinitionSubstitutions name for the function: a published version's ARN.
    if (fn && principal === 'state-machine') {
      const invoked = Object.values(cfg.stateMachine.substitutions).find((v) => v === fn.arn || String(v).startsWith(`${fn.arn}:`));
      if (invoked) return invoked;
    }
  } else if (service === 'sqs') {
    if (!/^[A-Za-z0-9_-]{1,80}(\.fifo)?$/.test(r)) throw new InputError(`${action} on ${resource}: an SQS resource is a queue's name`);
    // The local dead-letter queue is the one the function is given as its SAGA_DEAD_LETTER_QUEUE_URL when deployed.
    if (r === opts.localQueue) {
      const url = Object.values(cfg.functions).find((f) => f.binary === principal)?.environment?.SAGA_DEAD_LETTER_QUEUE_URL;
      const q = Object.values(cfg.queues ?? {}).find((x) => x.url === url);
      if (!q) throw new InputError(`${action} on the local queue ${resource}: the template gives ${principal} no SAGA_DEAD_LETTER_QUEUE_URL naming a queue of the stack`);
      return q.arn;
    }
  }
  return arnOf(cfg, service, r);
}

// The resolved value -> symbol table, longest first, so ARNs and names print the way the template writes them.
function symbolizer(cfg) {
  const pairs = Object.entries(cfg.symbols).sort((a, b) => b[0].length - a[0].length);
  const allowed = cfg.allowedTables.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const tableEntry = new RegExp(`:table/(${allowed.join('|')})$`);
  return (s) => {
    if (typeof s !== 'string') return s;
    let out = s.replace(tableEntry, ':table/${AllowedTables}');
    for (const [value, sym] of pairs) out = out.split(value).join(sym);
    return out;
  };
}

// ---------------------------------------------------------------- principals

function identity(name, cfg, roleLogical) {
  const role = cfg.roles[roleLogical];
  if (!role) throw new InputError(`${cfg.config}: no role ${roleLogical} for ${name}`);
  const policies = role.inline.map((p) => ({ name: `${roleLogical}/${p.name}`, policy: p.document, label: p.name, owner: name }));
  for (const arn of role.managed) {
    if (!MANAGED[arn]) throw new InputError(`${cfg.config}: ${roleLogical} holds the managed policy ${arn}, which tools/iam/managed-policies.json lacks`);
    policies.push({ name: arn.split('/').pop(), policy: MANAGED[arn], label: arn.split('/').pop(), owner: name });
  }
  return { name, kind: 'role', arn: role.arn, roleLogical, policies };
}

function principals(cfg, docs) {
  const out = {};
  for (const [logical, fn] of Object.entries(cfg.functions)) {
    if (fn.binary) out[fn.binary] = identity(fn.binary, cfg, fn.role);
  }
  out['state-machine'] = identity('state-machine', cfg, cfg.stateMachine.role);
  for (const [logical, role] of Object.entries(cfg.roles)) {
    if (!Object.values(out).some((p) => p.roleLogical === logical)) out[logical] = identity(logical, cfg, logical);
  }
  for (const [name, doc] of Object.entries(docs.policies)) {
    out[name] = {
      name,
      kind: 'caller',
      arn: `arn:${cfg.partition}:iam::${cfg.account}:user/${name}`,
      policies: [{ name: `docs/iam.md ${name}`, policy: fillPolicy(doc, cfg), label: name, owner: name }],
    };
  }
  // The library and the CLI in the suites' own processes: in process, starting executions (the library's start,
  // sweep --state-machine), or through a stack (sweep --stack invokes the sweeper), so held to those CLI policies
  // together.
  out.caller = {
    name: 'caller',
    kind: 'caller',
    arn: `arn:${cfg.partition}:iam::${cfg.account}:user/caller`,
    policies: [...out['caller-in-process'].policies, ...out['caller-state-machine'].policies, ...out['caller-stack'].policies],
    aggregate: true,
  };
  return out;
}

// ---------------------------------------------------------------- calls that do not run locally

const DOC = {
  apiInvoke:
    'API Gateway Lambda proxy integration without credentials: API Gateway invokes the function under the function\'s resource policy (https://docs.aws.amazon.com/apigateway/latest/developerguide/integrating-api-with-aws-services-lambda.html; integration credentials: https://docs.aws.amazon.com/apigateway/latest/api/API_Integration.html)',
  apiCaller: 'IAM authorization of a REST API: the caller needs execute-api:Invoke on the method ARN (https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html)',
  schedule: 'EventBridge invokes a Lambda target under the function\'s resource policy (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-lambda-permissions)',
  sfnTarget: 'EventBridge starts a Step Functions target with the target\'s role (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-identity-based.html#eb-target-permissions)',
  dlq: 'EventBridge sends an event it could not deliver to the target\'s dead-letter queue under the queue policy (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html#eb-dlq-perms)',
  logsTarget: 'EventBridge writes to a CloudWatch Logs target under a CloudWatch Logs resource policy (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-cloudwatchlogs-permissions)',
  lambdaLogs: 'Lambda sends a function\'s logs with its execution role: CreateLogGroup, CreateLogStream, PutLogEvents (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html#monitoring-cloudwatchlogs-prereqs)',
  shares: 'A fanned-out step runs its shares by invoking its own function at the version that runs the step (shared/src/protocol/shares.rs, functions/common SelfInvoke; the Invoke API\'s Qualifier: https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html); the local stack runs $LATEST, the deployed state machine a published version',
  lambdaXray: 'Lambda active tracing: the execution role needs xray:PutTraceSegments and xray:PutTelemetryRecords (https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html#services-xray-permissions)',
  apiLogs: 'API Gateway writes a stage\'s access logs with the CloudWatch Logs role of the account setting (https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html#set-up-access-logging-permissions)',
  sfnLogs: 'Step Functions logging to CloudWatch Logs: the state machine\'s role needs the log delivery actions (https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html#cloudwatch-iam-policy)',
  sfnXray: 'Step Functions X-Ray tracing: the state machine\'s role needs the X-Ray write actions (https://docs.aws.amazon.com/step-functions/latest/dg/xray-iam.html)',
  assume: 'A service assumes the role it was given under the role\'s trust policy (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-service.html)',
  putEvents: 'A sender puts TransactWriteItems events on the default event bus; events:source holds the source of every entry (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-conditions.html)',
  lambdaDlq: 'Lambda sends an asynchronous event it gave up on (after the function\'s retries) to the function\'s dead-letter queue with the function\'s execution role (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html#invocation-dlq)',
  cliStack: 'dynamo-saga --stack NAME (cli/src/stack.rs, cli/src/api.rs): DescribeStacks for the stack\'s outputs and parameters, then submit, status and resume through the stack\'s API (SigV4-signed execute-api requests), and sweep by invoking the stack\'s sweeper function',
  cliRead: 'dynamo-saga get (shared/src/drivers/read.rs, committed by default) with the caller\'s own credentials: the item, and for an item a transaction holds its header and request pages, the table\'s key schema',
  cliAudit: 'dynamo-saga audit without --clear (shared/src/drivers/audit.rs): the table\'s key schema, a scan of it, and the header of each transaction holding a lock',
  cli: 'dynamo-saga submit --state-machine (cli/src/commands/submit.rs): begins the request in its own process (shared/src/drivers/start.rs, protocol/phase/begin.rs, protocol/one_call.rs; larger ones staged, shared/src/drivers/staging.rs), starts the execution, follows it with DescribeExecution and the status read',
};

function synthetic(cfg) {
  const calls = [];
  calls.unmatched = [];
  const add = (principal, action, resource, why, extra = {}) => calls.push({ principal, action, resource, why, synthetic: true, ...extra });
  const fnByArn = Object.fromEntries(Object.values(cfg.functions).map((f) => [f.arn, f]));
  const roleByArn = Object.fromEntries(Object.entries(cfg.roles).map(([l, r]) => [r.arn, l]));
  const sample = { id: '01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M', chunk: '0' };

  // The API: each route's caller (an API caller, and the CLI through a stack), then API Gateway's invocation of the
  // function.
  for (const route of cfg.api.routes) {
    const path = route.path.replace(/\{(\w+)\}/g, (_, k) => sample[k] ?? 'x');
    const methodArn = `${cfg.api.arn}/${cfg.api.stage}/${route.method}${path}`;
    add('caller-api', 'execute-api:Invoke', methodArn, DOC.apiCaller);
    add('caller-stack', 'execute-api:Invoke', methodArn, `${DOC.cliStack}; ${DOC.apiCaller}`);
    const fn = fnByArn[route.function];
    if (!fn) throw new InputError(`${cfg.config}: the route ${route.method} ${route.path} integrates ${route.function}, not a function of the template`);
    const how = `${route.method} ${route.path}`;
    if (!route.credentials) {
      add('apigateway.amazonaws.com', 'lambda:InvokeFunction', fn.arn, `${DOC.apiInvoke}; ${how}`, { sourceArn: methodArn });
    } else if (route.credentials === `arn:${cfg.partition}:iam::*:user/*`) {
      // Caller credentials: API Gateway calls Lambda as the caller.
      add('caller-api', 'lambda:InvokeFunction', fn.arn, `integration credentials arn:aws:iam::*:user/* (the caller's own) on ${how}`);
    } else {
      add(roleByArn[route.credentials] ?? route.credentials, 'lambda:InvokeFunction', fn.arn, `integration credentials ${route.credentials} on ${how}`);
    }
  }

  // The API's access logs, written with the account's logging role when the template makes it (a role the account
  // already names is outside the template).
  if (cfg.api.accessLog && cfg.api.accountLogRole) {
    for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
      add(cfg.api.accountLogRole, action, `${cfg.api.accessLog}:log-stream:sample`, DOC.apiLogs);
    }
  }

  // EventBridge rules and their targets.
  for (const rule of cfg.rules) {
    for (const t of rule.targets) {
      const service = t.arn.split(':')[2];
      if (service === 'lambda') {
        add('events.amazonaws.com', 'lambda:InvokeFunction', t.arn, `${DOC.schedule}; rule ${rule.logical}`, { sourceArn: rule.arn });
      } else if (service === 'states') {
        const role = roleByArn[t.role];
        if (!role) throw new InputError(`${cfg.config}: the target of ${rule.logical} has no role of the template`);
        add(role, 'states:StartExecution', t.arn, `${DOC.sfnTarget}; rule ${rule.logical}`);
      } else if (service === 'logs') {
        for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
          add('events.amazonaws.com', action, `${t.arn}:log-stream:sample`, `${DOC.logsTarget}; rule ${rule.logical}`, { sourceArn: rule.arn, resourcePolicy: 'logs' });
        }
      } else {
        throw new InputError(`${cfg.config}: rule ${rule.logical} targets ${t.arn}, which the simulation does not model`);
      }
      if (t.deadLetter) add('events.amazonaws.com', 'sqs:SendMessage', t.deadLetter, `${DOC.dlq}; rule ${rule.logical}`, { sourceArn: rule.arn });
    }
    // The senders of TransactWriteItems events: the source every stack accepts, and a team's own (dynamo-saga.orders),
    // each of which the rule must match; a team's policy must refuse another team's source.
    const detailType = 'TransactWriteItems';
    if (rule.pattern?.['detail-type']?.includes(detailType)) {
      const bus = arnOf(cfg, 'events', 'event-bus/default');
      const put = (principal, sources, extra = {}) =>
        add(principal, 'events:PutEvents', bus, `${DOC.putEvents}; source ${sources.join(', ') || '(none)'}`, {
          context: { ...(sources.length ? { 'events:source': sources } : {}), 'events:detail-type': [detailType] },
          ...extra,
        });
      for (const source of ['dynamo-saga', 'dynamo-saga.orders']) {
        if (!sourceMatches(rule.pattern.source, source)) {
          calls.unmatched.push(`NOT MATCHED rule ${rule.logical}: its pattern's source ${JSON.stringify(rule.pattern.source)} does not match an event of source ${source}, which docs/iam.md says it starts`);
        }
        put('caller-events', [source]);
      }
      put('caller-events', ['dynamo-saga', 'dynamo-saga.orders']);
      put('caller-events-orders', ['dynamo-saga.orders']);
      const mustDeny = { mustDeny: true };
      put('caller-events', ['dynamo-sagas'], mustDeny);
      put('caller-events', [], mustDeny);
      put('caller-events-orders', ['dynamo-saga.payments'], mustDeny);
      put('caller-events-orders', ['dynamo-saga.orders', 'dynamo-saga.payments'], mustDeny);
      put('caller-events-orders', ['dynamo-saga'], mustDeny);
    }
  }

  // Lambda's own dead-letter queue of each function invoked asynchronously: an event Lambda gave up on after its
  // retries goes there, sent with the function's role.
  for (const [logical, fn] of Object.entries(cfg.functions)) {
    if (!fn.deadLetter) continue;
    const service = fn.deadLetter.split(':')[2];
    const action = { sqs: 'sqs:SendMessage', sns: 'sns:Publish' }[service];
    if (!action) throw new InputError(`${cfg.config}: ${logical}'s dead-letter queue ${fn.deadLetter} is neither SQS nor SNS`);
    add(fn.binary ?? logical, action, fn.deadLetter, DOC.lambdaDlq);
  }

  // Lambda's own calls with each function's role.
  for (const [logical, fn] of Object.entries(cfg.functions)) {
    const p = fn.binary ?? logical;
    const group = arnOf(cfg, 'logs', `log-group:${fn.logGroup}`);
    add(p, 'logs:CreateLogGroup', group, DOC.lambdaLogs);
    for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) add(p, action, `${group}:log-stream:2026/01/01/[$LATEST]0123456789abcdef`, DOC.lambdaLogs);
    if (fn.tracing === 'Active') for (const action of ['xray:PutTraceSegments', 'xray:PutTelemetryRecords']) add(p, action, '*', DOC.lambdaXray);
    // Deployed, the state machine invokes a published version, which invokes itself at that version for each share.
    if (fn.environment?.SAGA_FAN_OUT !== undefined) add(p, 'lambda:InvokeFunction', `${fn.arn}:1`, DOC.shares);
  }

  // Step Functions' own calls with the state machine's role.
  const sm = cfg.stateMachine;
  if (sm.logging) {
    for (const a of ['CreateLogDelivery', 'GetLogDelivery', 'UpdateLogDelivery', 'DeleteLogDelivery', 'ListLogDeliveries', 'PutResourcePolicy', 'DescribeResourcePolicies', 'DescribeLogGroups']) {
      add('state-machine', `logs:${a}`, '*', DOC.sfnLogs);
    }
  }
  if (sm.tracing) for (const a of ['PutTraceSegments', 'PutTelemetryRecords', 'GetSamplingRules', 'GetSamplingTargets']) add('state-machine', `xray:${a}`, '*', DOC.sfnXray);

  // Every role: the service that uses it assumes it.
  for (const [logical, role] of Object.entries(cfg.roles)) {
    for (const st of role.trust.Statement) {
      for (const service of [st.Principal?.Service ?? []].flat()) add(service, 'sts:AssumeRole', role.arn, DOC.assume, { resourcePolicy: `trust:${logical}` });
    }
  }

  // The CLI through the state machine (a request of under 100 actions carried out in one call, a larger one staged
  // and begun, which samples whether the items it updates exist).
  const tx = cfg.transactionsTable.arn;
  const table = (t) => arnOf(cfg, 'dynamodb', `table/${t}`);
  const user = cfg.allowedTables.map((t) => t.replace('*', 'sample'));
  const cliCalls = [
    // The transactions table's replication, checked once a process (Store::admitted), and each table's key schema.
    ['dynamodb:DescribeTable', [tx, ...user.map(table)]],
    ['dynamodb:BatchGetItem', user.map(table)],
    ['dynamodb:PutItem', [tx, ...user.map(table)]],
    ['dynamodb:UpdateItem', user.map(table)],
    ['dynamodb:DeleteItem', user.map(table)],
    // DynamoDB judging a request it refused as a whole: the caller's actions with a check of a record never written.
    ['dynamodb:ConditionCheckItem', [tx, ...user.map(table)]],
    ['dynamodb:GetItem', [tx]],
    ['dynamodb:Query', [tx]],
    ['dynamodb:BatchWriteItem', [tx]],
    ['states:StartExecution', [sm.arn]],
    ['states:DescribeExecution', [arnOf(cfg, 'states', `execution:${sm.name}:${sample.id}`)]],
  ];
  for (const [action, arns] of cliCalls) for (const a of arns) add('caller-state-machine', action, a, DOC.cli);

  // The CLI through a stack: its settings, then the API (above) and the sweeper function.
  add('caller-stack', 'cloudformation:DescribeStacks', arnOf(cfg, 'cloudformation', `stack/${cfg.stack}/00000000-0000-0000-0000-000000000000`), DOC.cliStack);
  add('caller-stack', 'lambda:InvokeFunction', functionOf(cfg, 'saga-sweeper').arn, `${DOC.cliStack} (sweep)`);

  // What the CLI reads with the caller's own credentials, with or without a stack: get, and audit without --clear.
  for (const t of user.map(table)) {
    for (const action of ['dynamodb:GetItem', 'dynamodb:DescribeTable']) add('caller-read', action, t, DOC.cliRead);
    for (const action of ['dynamodb:DescribeTable', 'dynamodb:Scan']) add('caller-read', action, t, DOC.cliAudit);
  }
  for (const action of ['dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:DescribeTable']) add('caller-read', action, tx, DOC.cliRead);
  add('caller-read', 'dynamodb:GetItem', tx, DOC.cliAudit);
  return calls;
}

// Whether an EventBridge pattern's source list (exact strings and {"prefix": ...}) matches `source`.
function sourceMatches(patterns, source) {
  return (patterns ?? []).some((p) => (typeof p === 'string' ? p === source : typeof p?.prefix === 'string' && source.startsWith(p.prefix)));
}

// ---------------------------------------------------------------- evaluation

function contextFor(cfg, p, call) {
  const ctx = {
    'aws:RequestedRegion': cfg.region,
    'aws:SecureTransport': 'true',
    'aws:CurrentTime': '2026-01-01T00:00:00Z',
    'aws:EpochTime': '1767225600',
  };
  if (call.resource !== '*') ctx['aws:ResourceAccount'] = call.resource.split(':')[4] || cfg.account;
  if (p) {
    ctx['aws:PrincipalArn'] = p.arn;
    ctx['aws:PrincipalAccount'] = cfg.account;
    ctx['aws:PrincipalType'] = p.kind === 'role' ? 'AssumedRole' : 'User';
    ctx['aws:userid'] = 'AROASAMPLE:session';
  } else {
    ctx['aws:PrincipalServiceName'] = call.principal;
    ctx['aws:SourceAccount'] = cfg.account;
    if (call.sourceArn) ctx['aws:SourceArn'] = call.sourceArn;
  }
  return { ...ctx, ...(call.context ?? {}) };
}

function resourcePolicyFor(cfg, call) {
  if (call.resourcePolicy?.startsWith('trust:')) return cfg.roles[call.resourcePolicy.slice(6)].trust;
  if (call.resourcePolicy) return cfg.resourcePolicies[call.resourcePolicy];
  return cfg.resourcePolicies[call.resource];
}

// Why a denied request was denied: the statements that named the action, and what did not match.
function why(result) {
  const a = result.analysis ?? {};
  const parts = [];
  for (const [kind, analysis] of [['identity', a.identityAnalysis], ['resource', a.resourceAnalysis]]) {
    if (analysis && !(analysis.unmatchedStatements ?? []).some((s) => s.actionMatch)) parts.push(`${kind}: no statement names the action`);
    for (const s of analysis?.unmatchedStatements ?? []) {
      if (!s.actionMatch) continue;
      const e = s.explain ?? {};
      const res = list(e.resources).filter((r) => !r.matches).map((r) => `${r.resource}${r.errors?.length ? ` (${r.errors.join('; ')})` : ''}`);
      const conds = list(e.conditions).filter((c) => !c.matches).map((c) => `${c.operator} ${c.conditionKeyValue}`);
      const sid = s.statement?.Sid ? ` ${s.statement.Sid}` : '';
      if (res.length && !e.resourceMatch) parts.push(`${kind}${sid}: resource matches none of ${res.slice(0, 4).join(', ')}${res.length > 4 ? ', ...' : ''}`);
      else if (conds.length) parts.push(`${kind}${sid}: condition ${conds.join(', ')} fails`);
      else if (s.principalMatch && s.principalMatch !== 'Match') parts.push(`${kind}${sid}: principal does not match`);
    }
  }
  return parts.length ? parts.join('; ') : 'no statement allows the action';
}

async function main() {
  const opts = cli(process.argv.slice(2));
  if (!existsSync(PACKAGE)) throw new InputError('the evaluator is not installed: run tools/iam-sim.sh, which installs it into .local/iam-sim');
  const { runSimulation } = await import(pathToFileURL(PACKAGE).href);
  const configs = JSON.parse(readFileSync(opts.resolved, 'utf8'));
  const docs = readDocs(opts.docs, opts.policies);
  for (const needed of ['caller-api', 'caller-in-process', 'caller-state-machine', 'caller-events', 'caller-events-orders', 'caller-stack', 'caller-read']) {
    if (!docs.policies[needed]) throw new InputError(`${opts.policies} has no ${needed}.json`);
  }
  const { calls: recorded, lines } = await readLogs(opts.logs);
  const { calls: strongRecorded, lines: strongLines } = await readLogs(opts.strongLogs);
  const evaluator = JSON.parse(readFileSync(join(dirname(PACKAGE), '../../package.json'), 'utf8')).version;
  const report = { configs: [], denied: [], unused: [], unjustified: [], stale: [], recordedLines: lines + strongLines, recordedDistinct: recorded.length + strongRecorded.length };
  const log = (s) => opts.quiet || process.stdout.write(`${s}\n`);

  log(`policies: template.yaml through ${configs[0]?.translator ?? 'aws-sam-translator'}; evaluator: @cloud-copilot/iam-simulate ${evaluator}`);
  const unusedIn = new Map();
  const denials = new Map();
  for (const cfg of configs) {
    if (cfg.rulesFailed.length) throw new InputError(`${cfg.config}: the template's Rules refuse this configuration: ${cfg.rulesFailed.join('; ')}`);
    const sym = symbolizer(cfg);
    const ps = principals(cfg, docs);
    const calls = [];
    const strong = cfg.parameters.MultiRegionConsistency === 'STRONG';
    for (const c of strong ? [...recorded, ...strongRecorded] : recorded) {
      if (!ps[c.principal]) throw new InputError(`${c.where}: principal ${c.principal} is no function binary of the template, "state-machine" or "caller"`);
      calls.push({ ...c, resource: mapResource(cfg, opts, c.action, c.resource, c.principal) });
    }
    const notLocal = synthetic(cfg);
    calls.push(...notLocal);
    for (const line of notLocal.unmatched) denials.set(line, [...(denials.get(line) ?? []), cfg.config]);

    // Each distinct request once. Tables are many (every test makes its own) and every policy names them by pattern:
    // two tables that match the same Resource patterns of the principal's policies are decided alike, so one of them
    // stands for the others.
    const patternsOf = new Map();
    const classOf = (c) => {
      if (!c.action.startsWith('dynamodb:') || c.synthetic || !ps[c.principal]) return c.resource;
      if (!patternsOf.has(c.principal)) {
        const pats = new Set(ps[c.principal].policies.flatMap(({ policy }) => policy.Statement.flatMap((st) => [st.Resource ?? []].flat())));
        patternsOf.set(c.principal, [...pats].map(iamGlob));
      }
      return `dynamodb:${patternsOf.get(c.principal).map((re) => (re.test(c.resource) ? 1 : 0)).join('')}`;
    };
    const unique = new Map();
    for (const c of calls) {
      const k = `${c.principal}\u0000${c.action}\u0000${classOf(c)}\u0000${c.sourceArn ?? ''}\u0000${c.resourcePolicy ?? ''}\u0000${JSON.stringify(c.context ?? {})}\u0000${c.mustDeny ?? ''}`;
      if (!unique.has(k)) unique.set(k, { ...c, count: 0, alike: 0 });
      const u = unique.get(k);
      u.count += c.count ?? 1;
      if (u.resource !== c.resource) u.alike++;
    }
    const used = new Set();
    let denied = 0;
    for (const c of unique.values()) {
      const p = ps[c.principal];
      const service = !p;
      const sim = {
        request: {
          principal: service ? c.principal : p.arn,
          action: c.action,
          resource: { resource: c.resource, accountId: cfg.account },
          contextVariables: contextFor(cfg, p, c),
        },
        identityPolicies: service ? [] : p.policies.map(({ name, policy }) => ({ name, policy })),
        serviceControlPolicies: [],
        resourceControlPolicies: [],
      };
      const rp = resourcePolicyFor(cfg, c);
      if (rp) sim.resourcePolicy = rp;
      const r = await runSimulation(sim, {});
      if (r.resultType === 'error') {
        throw new InputError(`${cfg.config}: the evaluator refused ${c.principal} ${c.action} ${c.resource}: ${JSON.stringify(r.errors)}`);
      }
      const results = r.resultType === 'single' ? [r.result] : r.results;
      if (c.mustDeny) {
        // A call the docs say a policy refuses: allowed, it fails the run; denied, it uses nothing.
        if (r.overallResult === 'Allowed') {
          denied++;
          const line = `ALLOWED, MUST BE DENIED ${c.principal} ${c.action} ${c.resource} ${JSON.stringify(c.context ?? {})} [not run locally: ${c.why}]`;
          denials.set(line, [...(denials.get(line) ?? []), cfg.config]);
        }
        continue;
      }
      if (r.overallResult !== 'Allowed') {
        denied++;
        const alike = c.alike ? ` and ${c.alike} other resource(s) its policies name alike` : '';
        const line = `DENIED ${c.principal} ${c.action} ${c.resource}${alike} (${r.overallResult}; ${why(results[0])})${c.synthetic ? ` [not run locally: ${c.why}]` : ` [${c.where}, ${c.count} request(s)]`}`;
        denials.set(line, [...(denials.get(line) ?? []), cfg.config]);
        continue;
      }
      if (service) continue;
      const owners = Object.fromEntries(p.policies.map((x) => [x.name, x.owner]));
      for (const res of results) {
        for (const s of res.analysis?.identityAnalysis?.allowStatements ?? []) {
          const e = s.explain ?? {};
          for (const act of list(e.actions).filter((x) => x.matches)) {
            for (const rsrc of list(e.resources).filter((x) => x.matches)) {
              used.add(`${owners[s.policyId]}\u0000${s.policyId}\u0000${s.statement?.Sid ?? e.identifier}\u0000${act.action}\u0000${rsrc.resource}`);
            }
          }
        }
      }
    }

    // Every permission a role or caller policy holds: (principal, policy/statement, action, resource).
    // A permission as the template writes it is used when any of what it resolves to is (AllowedTables' entries, say).
    let held = 0;
    const heldHere = new Set();
    const usedHere = new Set();
    for (const p of Object.values(ps)) {
      if (p.aggregate) continue;
      for (const { name, policy, label } of p.policies) {
        policy.Statement.forEach((st, i) => {
          if (st.Effect !== 'Allow') return;
          const statement = st.Sid ?? String(i + 1);
          for (const action of [st.Action].flat()) {
            for (const resource of [st.Resource].flat()) {
              held++;
              const key = `${p.name}\u0000${name}\u0000${statement}\u0000${action}\u0000${resource}`;
              const shownStatement = st.Sid ?? (policy.Statement.length > 1 ? `${label}#${i + 1}` : label);
              const shown = [p.name, shownStatement, action, sym(resource)].join('\u0000');
              heldHere.add(shown);
              if (used.has(key)) usedHere.add(shown);
            }
          }
        });
      }
    }
    for (const shown of heldHere) if (!usedHere.has(shown)) unusedIn.set(shown, [...(unusedIn.get(shown) ?? []), cfg.config]);
    const synth = calls.filter((c) => c.synthetic).length;
    report.configs.push({ config: cfg.config, evaluated: unique.size, synthetic: synth, denied, permissions: held });
    log(`${cfg.config}: ${unique.size} distinct requests evaluated (${lines} log lines, ${recorded.length} distinct recorded requests; ${synth} not run locally), ${denied} denied; ${held} permissions held`);
  }

  // Denials, each once with the configurations it happens in.
  const everywhere = (where) => (where.length === configs.length ? 'every configuration' : where.join(', '));
  for (const [line, where] of denials) {
    const shown = `${line} in ${everywhere(where)}`;
    report.denied.push(shown);
    log(shown);
  }
  if (denials.size) log('');

  // Unused permissions: held in a configuration and used by no call there.
  // A justification's cells may use * for any run of characters (saga-* for every function, xray:GetSampling*).
  const glob = (pattern, value) => new RegExp(`^${pattern.split('*').map((x) => x.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`).test(value);
  const justification = (p, statement, action, resource) =>
    docs.justified.find((j) => glob(j.principal, p) && glob(j.statement, statement) && glob(j.action, action) && j.resource === resource);
  const matchedJustifications = new Set();
  for (const [shown, where] of unusedIn) {
    const [p, statement, action, resource] = shown.split('\u0000');
    const j = justification(p, statement, action, resource);
    const entry = { principal: p, statement, action, resource, configs: [...new Set(where)], why: j?.why, row: j?.row };
    report.unused.push(entry);
    if (j) matchedJustifications.add(j);
    else report.unjustified.push(entry);
  }
  for (const j of docs.justified) {
    if (!matchedJustifications.has(j)) report.stale.push(j);
  }
  const fmt = (u) => `${u.principal} | ${u.statement} | ${u.action} | ${u.resource}`;
  log(`unused permissions (held, and used by no call in some configuration): ${report.unused.length}`);
  const byRow = new Map();
  for (const u of report.unused.filter((x) => x.why)) byRow.set(u.row, [...(byRow.get(u.row) ?? []), u]);
  for (const [row, us] of byRow) {
    const configsOf = [...new Set(us.flatMap((u) => u.configs))];
    log(`  justified   ${row}: ${us.length} permission(s) (${everywhere(configsOf)})`);
  }
  for (const u of report.unjustified.sort((a, b) => fmt(a).localeCompare(fmt(b)))) {
    log(`  UNJUSTIFIED ${fmt(u)}  (${everywhere(u.configs)})`);
  }
  if (report.stale.length) {
    log(`\njustified in ${opts.docs} but used or not held (harmless: timing-dependent paths may run in one run and not another):`);
    for (const j of report.stale) log(`  ${fmt(j)}`);
  }
  if (opts.json) writeFileSync(opts.json, JSON.stringify(report, null, 1));

  if (opts.expectDenied.length) {
    const missed = opts.expectDenied.filter((t) => !report.denied.some((d) => d.includes(t)));
    for (const t of missed) process.stdout.write(`self-test: no denial contains ${JSON.stringify(t)}\n`);
    return missed.length ? 1 : 0;
  }
  log(`\n${report.denied.length} denied, ${report.unjustified.length} unused permissions without a justification in ${opts.docs}${opts.denialsOnly && report.unjustified.length ? ' (not failing: --denials-only)' : ''}`);
  return report.denied.length || (report.unjustified.length && !opts.denialsOnly) ? 1 : 0;
}

// Output cut short (piped into head): stop quietly.
process.stdout.on('error', (e) => {
  if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw e;
});

try {
  process.exitCode = await main();
} catch (e) {
  process.stderr.write(`iam-sim: ${e instanceof InputError ? e.message : e.stack}\n`);
  process.exitCode = 2;
}
