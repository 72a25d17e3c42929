// The client at work: a small request, a large one (staged), each followed to its end, and an event entry.
//
//   API_URL=https://.../v1/transactions TABLE=Orders node example.mjs
//
// Prints one JSON line: each transaction's id and final status, and the event entry. Run against the local stack by
// the test suite (tests/e2e.rs), so it cannot drift from the API.
import { ApiError, Client, eventEntry } from './dynamo-saga-client.mjs';

const puts = (table, prefix, n) => ({
  TransactItems: Array.from({ length: n }, (_, i) => ({
    Put: {
      TableName: table,
      Item: { pk: { S: `${prefix}-${String(i).padStart(4, '0')}` }, n: { N: '1' } },
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  })),
});

const api = new Client(process.env.API_URL);
const table = process.env.TABLE;
const out = {};
for (const [name, n] of [['small', 10], ['large', 250]]) {
  const started = await api.submit(puts(table, `js-${name}`, n));
  out[name] = { started, final: await api.wait(started.TransactionId) };
}
// The same request again: every condition fails, so it ends ROLLED_BACK, a reason for each action.
out.again = await api.wait((await api.submit(puts(table, 'js-small', 10))).TransactionId);
try {
  await api.status('not-an-id');
} catch (e) {
  if (!(e instanceof ApiError)) throw e;
  out.refused = { status: e.status, type: e.errorType };
}
out.event = eventEntry(puts(table, 'js-event', 3));
console.log(JSON.stringify(out));
