// A client of a dynamo-saga stack's API, for services in Node.js (20 or later): copy this file.
//
//   import { Client } from './dynamo-saga-client.mjs';
//   const api = new Client('https://ID.execute-api.REGION.amazonaws.com/v1/transactions');   // the ApiUrl output
//   const started = await api.submit({ TransactItems: [...] });   // any number of actions
//   const final = await api.wait(started.TransactionId);          // { State: 'COMMITTED' | 'ROLLED_BACK', Finished: true }
//
// Requests are signed with SigV4 for `execute-api` by the AWS SDK's own signer (@smithy/signature-v4, with
// @aws-crypto/sha256-js), with the credentials of the SDK's default chain (@aws-sdk/credential-provider-node) and the
// Region of AWS_REGION unless given. The caller needs `execute-api:Invoke` on the API, and the stack's
// CallerEntitlements decide which tables it may name.
//
// - `submit` sends a request of fewer than 100 actions whole to `POST /transactions`; a larger one is staged (created,
//   appended in chunks of 1,000 actions, sealed) and then started, so any size works. Without a ClientRequestToken it
//   gets one, so a call repeated after a timeout or a 5xx is the same transaction.
// - `status` is `GET /transactions/{id}`; `wait` polls it until `Finished` (the first read after half a second, each
//   next one twice as long, up to 5 s).
// - `resume` is `POST /transactions/{id}/resume`.
// - `eventEntry` is the `PutEvents` entry that has the stack's events function run the request.
//
// Errors: an answer other than 2xx throws an ApiError with `status`, `errorType` (ValidationError, AccessDenied,
// TransactionNotFound, Throttled, ...) and `message`.
import { randomUUID } from 'node:crypto';
import { Sha256 } from '@aws-crypto/sha256-js';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { SignatureV4 } from '@smithy/signature-v4';

// The most actions `POST /transactions` takes whole; larger requests are staged in chunks of CHUNK_ACTIONS.
export const SMALL_ACTIONS = 100;
export const CHUNK_ACTIONS = 1000;

export class ApiError extends Error {
  constructor(status, errorType, message) {
    super(`${status} ${errorType}: ${message}`);
    Object.assign(this, { status, errorType, message });
  }
}

export class Client {
  // `apiUrl` is the stack's ApiUrl output (ending in /transactions).
  constructor(apiUrl, { region = process.env.AWS_REGION, credentials = defaultProvider() } = {}) {
    if (!region) throw new Error('no AWS Region: pass { region } or set AWS_REGION');
    this.url = new URL(apiUrl.replace(/\/+$/, ''));
    this.signer = new SignatureV4({ service: 'execute-api', region, credentials, sha256: Sha256 });
  }

  // One signed request to the API (`path` after /transactions); the JSON answer.
  async call(method, path = '', body = undefined) {
    const url = new URL(this.url.href + path);
    const text = body === undefined ? undefined : JSON.stringify(body);
    const request = {
      method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port ? Number(url.port) : undefined,
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: { host: url.host, 'content-type': 'application/json' },
      body: text,
    };
    const signed = await this.signer.sign(request);
    const answer = await fetch(url, { method, headers: signed.headers, body: text });
    const raw = await answer.text();
    let out;
    try {
      out = raw ? JSON.parse(raw) : {};
    } catch {
      out = { message: raw };
    }
    if (!answer.ok) throw new ApiError(answer.status, out.__type ?? 'HttpError', out.message ?? raw);
    return out;
  }

  // Begins `request` (TransactWriteItems JSON, any number of actions) and starts it: the API's answer,
  // { TransactionId, State, Finished, ExecutionArn? }.
  async submit(request) {
    const req = { ClientRequestToken: randomUUID(), ...request };
    const items = req.TransactItems ?? [];
    if (items.length < SMALL_ACTIONS) return this.call('POST', '', req);
    const { TransactItems: _, ...envelope } = req;
    const { TransactionId: staged } = await this.call('POST', '/staged', envelope);
    const chunks = [];
    for (let i = 0; i < items.length; i += CHUNK_ACTIONS) chunks.push(items.slice(i, i + CHUNK_ACTIONS));
    for (const [n, chunk] of chunks.entries()) {
      await this.call('PUT', `/staged/${staged}/chunks/${n}`, { TransactItems: chunk });
    }
    const sealed = await this.call('POST', `/staged/${staged}/seal`, { Chunks: chunks.length });
    return this.call('POST', '', sealed.ExecutionInput);
  }

  // GET /transactions/{id}: the transaction's state, progress, reasons and capacity.
  status(transactionId) {
    return this.call('GET', `/${transactionId}`);
  }

  // Polls the status until the transaction has finished, pausing `firstPauseMs`, then twice as long each time up to
  // `longestPauseMs`; its last status. Throws after `timeoutMs`.
  async wait(transactionId, { timeoutMs = 900_000, firstPauseMs = 500, longestPauseMs = 5000 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (let pause = firstPauseMs; ; pause = Math.min(pause * 2, longestPauseMs)) {
      const status = await this.status(transactionId);
      if (status.Finished) return status;
      if (Date.now() + pause > deadline) throw new Error(`${transactionId} is still ${status.State} after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  // POST /transactions/{id}/resume: a new execution for a transaction whose own ended first.
  resume(transactionId) {
    return this.call('POST', `/${transactionId}/resume`);
  }
}

// The PutEvents entry that has the stack's events function run `request` (fewer than 100 actions, or the event's
// 256 KB): new EventBridgeClient({}).send(new PutEventsCommand({ Entries: [eventEntry(request)] })). `source` is
// `dynamo-saga` or `dynamo-saga.<service>`, which CallerEntitlements may name.
export function eventEntry(request, { source = 'dynamo-saga', bus = 'default' } = {}) {
  return { Source: source, DetailType: 'TransactWriteItems', Detail: JSON.stringify(request), EventBusName: bus };
}
