"""A local stand-in for the stack's API Gateway REST API, for clients that take its URL (the CLI through a stack, the
tests): the routes, their functions and their IAM authorization as template.yaml deploys them, in front of the local
Lambda Invoke API (`cargo lambda watch`).

  .local/venv/bin/python tools/apigw-local.py --lambda URL --identities FILE [--port 0] [--stage v1]

Prints its base URL (http://127.0.0.1:PORT/STAGE) once listening; POST /transactions is then BASE/transactions.

- Routes: the SAM transform of template.yaml (aws-sam-translator, through tools/iam/resolve.py) gives every method of
  the REST API with the function its Lambda proxy integration invokes; the function is invoked by its binary's name,
  as the local stack serves it. A path no route matches answers 403 {"message": "Missing Authentication Token"}, as
  API Gateway does.
- IAM authorization (every route's, AWS_IAM): the request must carry a SigV4 signature for the service execute-api,
  which is checked with botocore's own signer against the secret key of the access key it names. The identities FILE
  is a JSON list of {"AccessKeyId", "SecretAccessKey", "UserArn", "Caller", "AccountId"}: what IAM knows of each key.
  An unknown key answers 403 "The security token included in the request is invalid.", a wrong signature 403 "The
  request signature we calculated does not match the signature you provided...", as API Gateway does. Whether the
  caller's own policy allows execute-api:Invoke is not evaluated here (the permission simulation, tools/iam-sim.sh,
  does that on the template's text).
- The Lambda proxy event (REST, payload version 1.0) carries requestContext.identity as API Gateway fills it for IAM
  authorization (userArn, caller, user, accountId, accessKey, sourceIp, userAgent); the function's answer
  (statusCode, headers, body, isBase64Encoded) is returned as it is. A function error answers 502 {"message":
  "Internal server error"}.
- A request body that is UTF-8 text reaches the function as text; one that is not (bytes no text decoding accepts)
  reaches it base64-encoded, with isBase64Encoded true, as API Gateway hands a Lambda proxy integration a payload it
  cannot carry as text: the function gets the very bytes sent, and answers for them.
- Not modelled: throttling, access logs, request validation, the 10 MB payload limit and the 29 s integration timeout.
"""

import argparse
import base64
import datetime
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "iam"))

import resolve  # noqa: E402  (tools/iam/resolve.py: the SAM transform and the template's resolved resources)

AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})")


def routes_of(template):
    """[(method, path template, binary)] of the API as the template deploys it."""
    config = "standard-all-on"
    params = {**resolve.BASE_PARAMETERS, **resolve.CONFIGS[config]}
    out = resolve.resolve(resolve.load_sam(template), config, params)
    binaries = {f["arn"]: f["binary"] for f in out["functions"].values()}
    routes = []
    for r in out["api"]["routes"]:
        binary = binaries.get(r["function"])
        if binary is None:
            raise SystemExit(f"apigw-local: {r['method']} {r['path']} invokes no function of the template")
        if r["auth"] != [["AWS_IAM"]]:
            raise SystemExit(f"apigw-local: {r['method']} {r['path']} is not IAM-authorized ({r['auth']})")
        routes.append((r["method"], r["path"], binary))
    return routes, out["api"]["stage"]


def match(routes, method, path):
    """The route of `method path` and its path parameters, or None."""
    for m, template, binary in routes:
        if m != method:
            continue
        names = re.findall(r"\{([^}]+)\}", template)
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "([^/]+)", re.escape(template)) + "$"
        found = re.match(pattern, path)
        if found:
            return template, binary, dict(zip(names, [urllib.parse.unquote(v) for v in found.groups()]))
    return None


def verify(identities, method, url, headers, body):
    """The identity that signed the request, or (status, message) when the signature does not hold."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers.get("authorization")
    if not auth:
        return None, "Missing Authentication Token"
    m = AUTH.fullmatch(auth.strip())
    if not m:
        return None, "Authorization header requires 'Credential', 'Signature', 'SignedHeaders' and 'X-Amz-Date' parameters."
    key_id, day, region, service, signed, signature = m.groups()
    who = next((i for i in identities if i["AccessKeyId"] == key_id), None)
    if who is None:
        return None, "The security token included in the request is invalid."
    stamp = headers.get("x-amz-date", "")
    if service != "execute-api" or not stamp.startswith(day):
        return None, "Credential should be scoped to correct service: 'execute-api'."
    try:
        at = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None, "Date must be in ISO-8601 'basic format'."
    if abs((datetime.datetime.now(datetime.timezone.utc) - at).total_seconds()) > 300:
        return None, "Signature expired: the request is more than 5 minutes from the server's time."
    names = signed.split(";")
    if "host" not in names:
        return None, "'Host' must be a signed header."
    request = AWSRequest(method=method, url=url, headers={n: headers.get(n, "") for n in names}, data=body)
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key_id, who["SecretAccessKey"], headers.get("x-amz-security-token")), service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if expected != signature:
        return None, ("The request signature we calculated does not match the signature you provided. Check your AWS "
                      "Secret Access Key and signing method. Consult the service documentation for details.")
    return who, None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the tests read answers, not logs
        pass

    def reply(self, status, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        headers = {k.lower(): v for k, v in (headers or {"content-type": "application/json"}).items()}
        headers["content-length"] = str(len(data))
        headers["x-amzn-requestid"] = self.request_id
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        s = self.server
        self.request_id = str(uuid.uuid4())
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        prefix = f"/{s.stage}"
        if not (path == prefix or path.startswith(prefix + "/")):
            return self.reply(403, {"message": "Missing Authentication Token"})
        resource_path = path[len(prefix):] or "/"
        found = match(s.routes, self.command, resource_path)
        if found is None:
            return self.reply(403, {"message": "Missing Authentication Token"})
        resource, binary, params = found
        headers = {k.lower(): v for k, v in self.headers.items()}
        url = f"http://{headers.get('host', '')}{self.path}"
        who, refusal = verify(s.identities, self.command, url, headers, body)
        if who is None:
            return self.reply(403, {"message": refusal})
        try:
            text, encoded = (body.decode("utf-8", errors="strict") if body else None), False
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode("ascii"), True
        now = datetime.datetime.now(datetime.timezone.utc)
        event = {
            "resource": resource,
            "path": resource_path,
            "httpMethod": self.command,
            "headers": dict(self.headers.items()),
            "multiValueHeaders": {k: self.headers.get_all(k) for k in self.headers.keys()},
            "queryStringParameters": dict(urllib.parse.parse_qsl(query)) or None,
            "multiValueQueryStringParameters": None,
            "pathParameters": params or None,
            "stageVariables": None,
            "requestContext": {
                "resourcePath": resource,
                "httpMethod": self.command,
                "path": path,
                "accountId": who["AccountId"],
                "protocol": "HTTP/1.1",
                "stage": s.stage,
                "requestId": self.request_id,
                "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                "requestTimeEpoch": int(now.timestamp() * 1000),
                "identity": {
                    "accountId": who["AccountId"],
                    "caller": who["Caller"],
                    "user": who["Caller"],
                    "userArn": who["UserArn"],
                    "accessKey": who["AccessKeyId"],
                    "sourceIp": self.client_address[0],
                    "userAgent": self.headers.get("user-agent"),
                },
                "apiId": "local",
            },
            "body": text,
            "isBase64Encoded": encoded,
        }
        invoke = urllib.request.Request(f"{s.lambda_url}/2015-03-31/functions/{binary}/invocations",
                                        data=json.dumps(event).encode(), method="POST",
                                        headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(invoke, timeout=900) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError:
            return self.reply(502, {"message": "Internal server error"})
        if not isinstance(answer, dict) or "statusCode" not in answer:
            return self.reply(502, {"message": "Internal server error"})
        out = answer.get("body") or ""
        data = base64.b64decode(out) if answer.get("isBase64Encoded") else out.encode()
        self.reply(int(answer["statusCode"]), data, answer.get("headers") or {})

    do_GET = do_POST = do_PUT = do_DELETE = handle_any


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lambda", dest="lambda_url", required=True, help="the local Lambda Invoke API's base URL")
    ap.add_argument("--identities", required=True, help="JSON list of the access keys IAM knows")
    ap.add_argument("--template", default=os.path.join(ROOT, "template.yaml"))
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)
    routes, stage = routes_of(args.template)
    with open(args.identities) as f:
        identities = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.routes, server.stage, server.identities = routes, stage, identities
    server.lambda_url = args.lambda_url.rstrip("/")
    print(f"http://127.0.0.1:{server.server_address[1]}/{stage}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
