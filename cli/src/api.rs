//! The stack's API as a client (`--stack`): requests signed with the caller's own credentials (SigV4, service
//! `execute-api`), as API Gateway's IAM authorization wants them, so the caller needs `execute-api:Invoke` and no
//! access to the transactions table or the callers' tables.

use std::time::SystemTime;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use bytes::Bytes;
use dynamo_saga::error::{Denied, Invalid};
use dynamo_saga::TxError;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The API of one stack: its `ApiUrl` output (`https://ID.execute-api.REGION.amazonaws.com/STAGE/transactions`).
pub struct Api {
    url: String,
    region: String,
    credentials: SharedCredentialsProvider,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Api {
    /// A client of the API at `url` with the credentials and Region of `sdk`.
    pub fn new(url: &str, sdk: &aws_config::SdkConfig) -> Result<Api, String> {
        let credentials = sdk.credentials_provider().ok_or("no AWS credentials are configured")?;
        let region = sdk.region().ok_or("no AWS Region is configured (AWS_REGION or a profile's region)")?;
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
            .map_err(|e| format!("the system's root certificates: {e}"))?
            .https_or_http()
            .enable_http1()
            .build();
        let http = Client::builder(hyper_util::rt::TokioExecutor::new()).build(tls);
        Ok(Api { url: url.trim_end_matches('/').to_string(), region: region.to_string(), credentials, http })
    }

    /// Sends `method` to the API's `path` (after `/transactions`: `""`, `/staged`, `/{id}`, ...) with `body`, and
    /// reads the answer as `T`; an error answer becomes the error it names (`ValidationError`, `AccessDenied`,
    /// `TransactionNotFound`, `Throttled`), as the API functions raise them.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, TxError> {
        let url = format!("{}{path}", self.url);
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let identity = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| TxError::Internal(format!("AWS credentials: {e}")))?
            .into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("execute-api")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| TxError::Internal(format!("signing {method} {url}: {e}")))?
            .into();
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
            .map_err(|e| TxError::Internal(format!("{method} {url}: {e}")))?;
        let headers = request.headers().iter().filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(method, &url, headers, SignableBody::Bytes(&body))
            .map_err(|e| TxError::Internal(format!("signing {method} {url}: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| TxError::Internal(format!("signing {method} {url}: {e}")))?
            .into_parts();
        instructions.apply_to_request_http1x(&mut request);
        let answer = self
            .http
            .request(request)
            .await
            .map_err(|e| TxError::DynamoDb { op: "the API", message: format!("{method} {url}: {e}") })?;
        let status = answer.status().as_u16();
        let bytes = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| TxError::Internal(format!("{method} {url}: reading the answer: {e}")))?
            .to_bytes();
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return serde_json::from_value(json).map_err(|e| {
                TxError::Internal(format!(
                    "{method} {url}: an answer this CLI does not read ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                ))
            });
        }
        Err(api_error(status, &json, &format!("{method} {url}")))
    }
}

/// The error an API answer names: the API functions' `{"__type", "message"}`, or API Gateway's own `{"message"}`.
fn api_error(status: u16, json: &Value, what: &str) -> TxError {
    let message = json["message"].as_str().unwrap_or("").to_string();
    match (status, json["__type"].as_str()) {
        (_, Some("ValidationError")) => TxError::Validation(Invalid { action: None, message }),
        (_, Some("AccessDenied")) => TxError::AccessDenied(Denied { action: None, table: String::new(), message }),
        (_, Some("TransactionNotFound")) | (404, _) => TxError::NotFound(message),
        (_, Some("Throttled")) | (429, _) => TxError::Throttled(message),
        // API Gateway's own refusal: a signature it did not take, or a caller its IAM policy does not allow.
        (403, None) => TxError::AccessDenied(Denied {
            action: None,
            table: String::new(),
            message: format!("{what}: API Gateway refused the request (HTTP 403): {message}"),
        }),
        (_, name) => TxError::Internal(format!(
            "{what}: HTTP {status} {}{message}",
            name.map(|n| format!("{n}: ")).unwrap_or_default()
        )),
    }
}
