"""A client of a dynamo-saga stack's API, for services in Python: copy this file.

    from dynamo_saga_client import Client
    api = Client("https://ID.execute-api.REGION.amazonaws.com/v1/transactions")   # the stack's ApiUrl output
    started = api.submit({"TransactItems": [...]})     # any number of actions
    final = api.wait(started["TransactionId"])          # {"State": "COMMITTED" | "ROLLED_BACK", "Finished": True, ...}

Requests are signed with SigV4 for `execute-api` by botocore (part of boto3), with the credentials and Region of the
standard chain (environment, profile, instance or task role), and the Region of `region`, else AWS_REGION, else the
profile's. The caller needs `execute-api:Invoke` on the API, and
the stack's CallerEntitlements decide which tables it may name. Only the standard library and botocore are used.

- `submit` sends a request of fewer than 100 actions whole to `POST /transactions`; a larger one is staged (created,
  appended in chunks of 1,000 actions, sealed) and then started, so any size works. Without a `ClientRequestToken` it
  gets one, so a call repeated after a timeout or a 5xx is the same transaction.
- `status` is `GET /transactions/{id}`; `wait` polls it until `Finished` (a transaction the stack ended is finished at
  once; the first read comes after half a second, each next one waits twice as long, up to 5 s).
- `resume` is `POST /transactions/{id}/resume`.
- `event_entry` is the `PutEvents` entry that has the stack's events function run the request.

Errors: an answer other than 2xx raises `ApiError` with the status, the error's `__type` (`ValidationError`,
`AccessDenied`, `TransactionNotFound`, `Throttled`, ...) and its message.
"""

import json
import os
import time
import urllib.error
import urllib.request
import uuid

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

# The most actions `POST /transactions` takes whole; larger requests are staged in chunks of CHUNK_ACTIONS.
SMALL_ACTIONS = 100
CHUNK_ACTIONS = 1000


class ApiError(Exception):
    """A refused or failed call: the HTTP status, the error's type and message."""

    def __init__(self, status, error_type, message):
        super().__init__(f"{status} {error_type}: {message}")
        self.status, self.error_type, self.message = status, error_type, message


class Client:
    def __init__(self, api_url, region=None, session=None, timeout=30):
        """`api_url` is the stack's `ApiUrl` output (ending in /transactions); `region` defaults to the session's."""
        self.url = api_url.rstrip("/")
        self.session = session or botocore.session.get_session()
        self.region = region or os.environ.get("AWS_REGION") or self.session.get_config_variable("region")
        if not self.region:
            raise ValueError("no AWS Region: pass region= or set AWS_REGION")
        self.timeout = timeout

    def call(self, method, path="", body=None):
        """One signed request to the API (`path` after /transactions); the JSON answer."""
        data = json.dumps(body).encode() if body is not None else None
        request = AWSRequest(method=method, url=self.url + path, data=data,
                             headers={"content-type": "application/json"})
        credentials = self.session.get_credentials()
        if credentials is None:
            raise ValueError("no AWS credentials in the standard chain")
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        prepared = urllib.request.Request(request.url, data=data, method=method, headers=dict(request.headers))
        try:
            with urllib.request.urlopen(prepared, timeout=self.timeout) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                out = json.loads(text)
            except ValueError:
                out = {"message": text}
            raise ApiError(e.code, out.get("__type", "HttpError"), out.get("message", text)) from None

    def submit(self, request):
        """Begins `request` (TransactWriteItems JSON, any number of actions) and starts it: the API's answer,
        `{"TransactionId", "State", "Finished", "ExecutionArn"?}`."""
        request = dict(request)
        request.setdefault("ClientRequestToken", str(uuid.uuid4()))
        items = request.get("TransactItems") or []
        if len(items) < SMALL_ACTIONS:
            return self.call("POST", "", request)
        envelope = {k: v for k, v in request.items() if k != "TransactItems"}
        staged = self.call("POST", "/staged", envelope)["TransactionId"]
        chunks = [items[i:i + CHUNK_ACTIONS] for i in range(0, len(items), CHUNK_ACTIONS)]
        for n, chunk in enumerate(chunks):
            self.call("PUT", f"/staged/{staged}/chunks/{n}", {"TransactItems": chunk})
        sealed = self.call("POST", f"/staged/{staged}/seal", {"Chunks": len(chunks)})
        return self.call("POST", "", sealed["ExecutionInput"])

    def status(self, transaction_id):
        """`GET /transactions/{id}`: the transaction's state, progress, reasons and capacity."""
        return self.call("GET", f"/{transaction_id}")

    def wait(self, transaction_id, timeout=900, first_pause=0.5, longest_pause=5.0):
        """Polls the status until the transaction has finished, pausing `first_pause`, then twice as long each time
        up to `longest_pause`; its last status. Raises TimeoutError after `timeout` seconds."""
        deadline, pause = time.monotonic() + timeout, first_pause
        while True:
            status = self.status(transaction_id)
            if status.get("Finished"):
                return status
            if time.monotonic() + pause > deadline:
                raise TimeoutError(f"{transaction_id} is still {status.get('State')} after {timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, longest_pause)

    def resume(self, transaction_id):
        """`POST /transactions/{id}/resume`: a new execution for a transaction whose own ended first."""
        return self.call("POST", f"/{transaction_id}/resume")


def event_entry(request, source="dynamo-saga", bus="default"):
    """The `PutEvents` entry that has the stack's events function run `request` (fewer than 100 actions, or the
    event's 256 KB): `boto3.client("events").put_events(Entries=[event_entry(request)])`. `source` is `dynamo-saga`
    or `dynamo-saga.<service>`, which CallerEntitlements may name."""
    return {"Source": source, "DetailType": "TransactWriteItems", "Detail": json.dumps(request), "EventBusName": bus}
