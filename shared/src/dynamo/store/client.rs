//! How a store's clients are built: the retries, the time bounds and the in-flight limit every request gets.

use std::sync::Arc;

use aws_sdk_dynamodb::Client;

use super::Store;
use crate::config::Config;
use crate::dynamo::pace::{Pace, Watch};

impl Store {
    /// A store on a client built elsewhere, as it is but for time bounds: its in-flight limit stays `SAGA_IN_FLIGHT`,
    /// since the client does not tell it of throttling ([`Store::from_conf`] does), and a client with no attempt or
    /// operation timeout of its own gets [`Store::timeouts`]' (so no request of a store is left without a bound).
    pub fn new(client: Client, cfg: Config) -> Self {
        let pace = Pace::new(cfg.concurrency);
        let bounded = client
            .config()
            .timeout_config()
            .is_some_and(|t| t.operation_attempt_timeout().is_some() && t.operation_timeout().is_some());
        let client = if bounded {
            client
        } else {
            let mut timeouts = Self::timeouts(&cfg);
            if let Some(own) = client.config().timeout_config() {
                timeouts = own.clone().take_defaults_from(&timeouts).clone();
            }
            Client::from_conf(client.config().to_builder().timeout_config(timeouts).build())
        };
        Self::paced(client, cfg, pace)
    }

    fn paced(client: Client, cfg: Config, pace: Arc<Pace>) -> Self {
        // Writes sent once ([`Store::update_once`]): the same client (endpoint, credentials, timeouts, interceptors)
        // but for retries, which it never makes.
        let once = Client::from_conf(
            client.config().to_builder().retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()).build(),
        );
        Self {
            client,
            workers: None,
            announcer: None,
            deadline: None,
            once,
            cfg: Arc::new(cfg),
            caches: Arc::default(),
            faults: None,
            billing: None,
            pace,
        }
    }

    /// A client from the standard AWS configuration chain (profile, region, `AWS_ENDPOINT_URL_DYNAMODB`), set up as
    /// [`Store::from_conf`] sets it up.
    pub async fn connect(cfg: Config) -> Self {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        Self::from_conf(aws_sdk_dynamodb::config::Builder::from(&sdk), cfg)
    }

    /// A store whose client is built from `conf` the way throttling needs it: the SDK's standard retry mode (12
    /// attempts) with a short, jittered first wait of up to 25 ms, doubling up to 5 s, so that a throttled write
    /// costs tens of milliseconds rather than the default's second; and an in-flight limit that halves when DynamoDB
    /// throttles and grows back to `SAGA_IN_FLIGHT` while calls succeed ([`Pace`]). With `SAGA_CALL_LOG` set, the
    /// client also logs its calls ([`crate::dynamo::call_log`]).
    pub fn from_conf(conf: aws_sdk_dynamodb::config::Builder, cfg: Config) -> Self {
        let pace = Pace::new(cfg.concurrency);
        let mut conf = Self::with_retries(conf)
            .timeout_config(Self::timeouts(&cfg))
            .http_client(Self::http_client(&cfg))
            .interceptor(Watch(pace.clone()));
        if let Some(log) = crate::dynamo::call_log::CallLog::from_env() {
            conf = conf.interceptor(log);
        }
        Self::paced(Client::from_conf(conf.build()), cfg, pace)
    }

    /// The HTTP client [`Store::from_conf`] gives its client: the SDK's own (hyper, rustls on aws-lc-rs), whose pool
    /// lets a connection sit idle for [`Config::idle_connection`] at most. A request never goes on a connection older
    /// than that, so a warm Lambda function's first request after a pause opens a fresh connection rather than
    /// writing on one the service has closed meanwhile, losing the request and its answer.
    pub fn http_client(cfg: &Config) -> aws_sdk_dynamodb::config::SharedHttpClient {
        aws_smithy_http_client::Builder::new()
            .pool_idle_timeout(cfg.idle_connection)
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::AwsLc,
            ))
            .build_https()
    }

    /// `conf` with the retries [`Store::from_conf`] gives its client: [`Store::retry_config`], without the SDK's retry
    /// quota. They also send again a write a multi-Region strongly consistent table refused for a concurrent change in
    /// another Region (`ReplicatedWriteConflictException`, which the SDK models as retryable). The in-flight limit
    /// bounds retries as it bounds first attempts, so the quota (a token bucket that a burst of a hundred retries
    /// empties, after which nothing is retried) would only turn a busy moment into failed phases.
    pub fn with_retries(conf: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
        let partition = aws_sdk_dynamodb::config::retry::RetryPartition::custom("dynamo-saga")
            .token_bucket(aws_sdk_dynamodb::config::retry::TokenBucket::unlimited())
            .build();
        conf.retry_config(Self::retry_config()).retry_partition(partition)
    }

    /// The retries [`Store::from_conf`] gives its client: the SDK's standard mode, 12 attempts, a jittered first wait
    /// of up to 25 ms, doubling up to 5 s. They cover throttling and DynamoDB's transient errors (an
    /// `InternalServerError` included): every write the protocol sends is safe to send again, but for lock writes,
    /// which are sent once ([`Store::update_once`]).
    pub fn retry_config() -> aws_sdk_dynamodb::config::retry::RetryConfig {
        aws_sdk_dynamodb::config::retry::RetryConfig::standard()
            .with_max_attempts(12)
            .with_initial_backoff(std::time::Duration::from_millis(25))
            .with_max_backoff(std::time::Duration::from_secs(5))
    }

    /// The time bounds [`Store::from_conf`] gives every request: an attempt timeout and an operation timeout, so that
    /// no request of this store stays outstanding longer than [`Config::operation_timeout`] (a write sent once, longer
    /// than [`Config::attempt_timeout`]). The SDK sets neither by default. What the client gives up on may still be
    /// carried out by DynamoDB; on AWS, not after the five minutes a SigV4 signature is accepted for.
    pub fn timeouts(cfg: &Config) -> aws_sdk_dynamodb::config::timeout::TimeoutConfig {
        aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(cfg.attempt_timeout)
            .operation_timeout(cfg.operation_timeout)
            .build()
    }
}
