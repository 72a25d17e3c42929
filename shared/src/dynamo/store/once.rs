//! Writes sent once: the SDK never sends a copy of one, and an answer that does not say whether DynamoDB carried the
//! write out is reported as such ([`Once::Unknown`]) instead of retried.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;

use super::{backoff, map_err, Answer, Meter, Sent, Store, Written};
use crate::error::TxError;

/// What a write sent once ([`Store::update_once`], [`Store::put_once`]) came to.
#[derive(Debug)]
pub enum Once {
    /// DynamoDB's answer.
    Known(Written),
    /// No answer that says whether DynamoDB carried the write out (a timeout, a broken connection, a server error):
    /// the request may still land, later, so nothing it carries can be trusted to be sent only once any more.
    Unknown(String),
}

/// Attempts of a write sent once that DynamoDB keeps refusing before carrying it out (throttling), as the client's
/// own retries make ([`Store::retry_config`]).
const ONCE_ATTEMPTS: u32 = 12;

/// Sends the write `send` builds until DynamoDB answers it or its outcome is unknown: a write DynamoDB refused before
/// carrying it out (throttling, a conflict with a DynamoDB transaction) is sent again after a jittered wait, up to
/// [`ONCE_ATTEMPTS`] attempts.
async fn until_answered<F, Fut>(mut send: F) -> Result<Once, TxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Answer, TxError>>,
{
    let mut tries = 0u32;
    loop {
        match send().await? {
            Answer::Known(w) => return Ok(Once::Known(w)),
            Answer::Unknown(message) => return Ok(Once::Unknown(message)),
            Answer::Refused(e) if tries + 1 >= ONCE_ATTEMPTS => return Err(e),
            Answer::Refused(_) => {
                tries += 1;
                backoff(tries).await;
            }
        }
    }
}

/// What the error of a write sent once says of it: refused before it was carried out (a client error: throttling, a
/// conflict with a DynamoDB transaction or with another Region's write, a request DynamoDB rejects; or a request that
/// never left the client, [`never_sent`]), or of unknown outcome (a server error, a timeout, a connection that broke
/// after the request was written).
pub(super) fn sent_once<E: ProvideErrorMetadata + std::fmt::Debug>(
    op: &'static str,
    e: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Sent {
    match &e {
        SdkError::ServiceError(se) if se.raw().status().is_client_error() => match se.err().code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "TransactionConflictException"
                | crate::dynamo::pace::REPLICATED_WRITE_CONFLICT,
            ) => Sent::Refused(map_err(op, e)),
            _ => Sent::Failed(map_err(op, e)),
        },
        SdkError::ConstructionFailure(_) => Sent::Failed(map_err(op, e)),
        _ if never_sent(&e) => Sent::Refused(map_err(op, e)),
        _ => Sent::Unknown(format!("{op}: {}", map_err(op, e))),
    }
}

/// Whether a request that failed in dispatch never left the client, so that nothing of it can land: no connection
/// could be made (a refused or timed-out connect, a failed TLS handshake: hyper-util's connect error), or the
/// connection was found closed before the request was written (hyper's error for a request dropped before it was
/// ever processed, or for a connection whose task had ended). Every other failure may come after DynamoDB received
/// the request: a connection closed before the whole answer came (hyper's `IncompleteMessage`, what a warm Lambda
/// meets on a pooled connection the service closed), a reset or read error, a timeout. Those answers are lost, not
/// their requests.
pub(crate) fn never_sent<E, R>(e: &SdkError<E, R>) -> bool {
    let SdkError::DispatchFailure(d) = e else { return false };
    let Some(connector) = d.as_connector_error() else { return false };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(connector);
    while let Some(err) = next {
        if err.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|h| h.is_connect()) {
            return true;
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            return h.is_canceled() || h.is_closed();
        }
        next = err.source();
    }
    false
}

impl Store {
    /// An `UpdateItem` sent once: the SDK does not send it again after an error, so when its outcome is unknown
    /// ([`Once::Unknown`]) no copy of it is left to land but the one sent. Throttling and conflicts with a DynamoDB
    /// transaction, which DynamoDB refuses before carrying anything out, are sent again here after a jittered wait, up
    /// to the client's 12 attempts ([`Store::retry_config`]). Lock writes are sent this way, so that a lock landing
    /// late never carries the value apply trusts (`phase::lock`).
    pub async fn update_once(&self, m: &Meter, req: UpdateItemFluentBuilder) -> Result<Once, TxError> {
        if let Some(crash) = self.hold_late(|| {
            let held = req.clone();
            async move { held.send().await }
        }) {
            return Err(crash);
        }
        let key = self.billed_key(req.get_table_name(), req.get_key());
        until_answered(|| {
            let (req, key) = (req.as_input().clone(), key.clone());
            async move {
                single_write!(
                    self,
                    m,
                    req,
                    key,
                    "UpdateItem",
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException,
                    true
                )
            }
        })
        .await
    }

    /// A `PutItem` sent once, as [`Store::update_once`] sends an update.
    pub async fn put_once(&self, m: &Meter, req: PutItemFluentBuilder) -> Result<Once, TxError> {
        if let Some(crash) = self.hold_late(|| {
            let held = req.clone();
            async move { held.send().await }
        }) {
            return Err(crash);
        }
        let key = self.billed_item_key(req.get_table_name(), req.get_item()).await?;
        until_answered(|| {
            let (req, key) = (req.as_input().clone(), key.clone());
            async move {
                single_write!(
                    self,
                    m,
                    req,
                    key,
                    "PutItem",
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException,
                    true
                )
            }
        })
        .await
    }
}
