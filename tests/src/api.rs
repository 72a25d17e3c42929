//! The local stack's API (`tools/apigw-local.py`) as its callers reach it: each request signed (SigV4, service
//! `execute-api`) with one caller's access key, as API Gateway's IAM authorization wants it. The keys are the ones
//! `tools/stack.sh` gives the stand-in (`STACK_DIR/identities.json`).

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::stack::Stack;

/// An IAM principal with an access key the local API knows.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub access_key: &'static str,
    pub secret: &'static str,
    /// The principal's ARN as API Gateway gives it (`requestContext.identity.userArn`).
    pub arn: &'static str,
}

/// The IAM user the tests and the CLI sign as (access key `local`): entitled to every allowed table.
pub const LOCAL: Caller = Caller { access_key: "local", secret: "local", arn: "arn:aws:iam::000000000000:user/local" };
/// A session of the role `orders-service`: entitled to the tables `t-ent-orders-*` alone.
pub const ORDERS: Caller = Caller {
    access_key: "AKIAORDERSSERVICE000",
    secret: "orders-secret",
    arn: "arn:aws:sts::000000000000:assumed-role/orders-service/tests",
};
/// A session of the role `payments-service`: no entitlement names it.
pub const PAYMENTS: Caller = Caller {
    access_key: "AKIAPAYMENTSSERVICE0",
    secret: "payments-secret",
    arn: "arn:aws:sts::000000000000:assumed-role/payments-service/tests",
};

/// Sends `method path` (after the API's base: `/transactions`, `/transactions/{id}`, ...) with `body`, signed as
/// `who`; the HTTP status and the JSON answer.
pub async fn call(st: &Stack, who: Caller, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    call_bytes(st, who, method, path, body.map(|b| b.to_string().into_bytes()).unwrap_or_default()).await
}

/// [`call`] with a body of any bytes, as a client may send them (text or not).
pub async fn call_bytes(st: &Stack, who: Caller, method: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
    let url = format!("{}{path}", st.api);
    let identity = Credentials::new(who.access_key, who.secret, None, None, "tests").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("execute-api")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .expect("signing parameters")
        .into();
    let mut request = http::Request::builder()
        .method(method)
        .uri(&url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.clone())))
        .expect("a request");
    let headers = request.headers().iter().map(|(k, v)| (k.as_str(), v.to_str().expect("ASCII headers")));
    let signable = SignableRequest::new(method, &url, headers, SignableBody::Bytes(&body)).expect("signable");
    let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
    instructions.apply_to_request_http1x(&mut request);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let answer = client.request(request).await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = answer.status().as_u16();
    let bytes = answer.into_body().collect().await.expect("the answer's body").to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("{method} {url} answered {status} with what is not JSON: {bytes:?}"));
    (status, json)
}

/// A Lambda proxy event (REST, payload 1.0) as API Gateway gives the API functions one from [`LOCAL`]: for tests
/// that invoke a function directly, as `sam local invoke -e` does.
pub fn event(method: &str, resource: &str, path_parameters: Value, body: Option<String>) -> Value {
    let mut path = resource.to_string();
    if let Some(params) = path_parameters.as_object() {
        for (k, v) in params {
            path = path.replace(&format!("{{{k}}}"), v.as_str().unwrap_or_default());
        }
    }
    serde_json::json!({
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": "application/json"},
        "pathParameters": if path_parameters.is_null() { Value::Null } else { path_parameters },
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": method,
            "stage": "v1",
            "requestId": "tests",
            "accountId": "000000000000",
            "identity": {"accountId": "000000000000", "caller": "AIDALOCALUSER00000000", "user": "AIDALOCALUSER00000000",
                "userArn": LOCAL.arn, "accessKey": LOCAL.access_key, "sourceIp": "127.0.0.1"},
        },
        "body": body,
        "isBase64Encoded": false,
    })
}
