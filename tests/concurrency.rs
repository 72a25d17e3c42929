//! Concurrency on DynamoDB Local: eight workers run bank transfers over 50 accounts while plain writers outside the
//! protocol keep writing the same accounts; see `harness::bank` for what is checked. `tools/soak.sh` runs bigger ones.

use harness::bank::{check, run, seed, Params};
use harness::Env;

#[tokio::test]
async fn transfers_and_plain_writers_keep_every_invariant() {
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let env = Env::new("bank").await;
    let p = Params {
        accounts: 50,
        workers: 8,
        transfers_per_worker: 3,
        min_k: 10,
        max_k: 50,
        plain_writers: 2,
        deadline_seconds: 120,
        seed: 7,
    };
    seed(&env, &p).await;
    let outcome = run(&env, &p).await;
    harness::report(format!("concurrency: {}", check(&env, &p, &outcome).await));
    // Wound-wait, with a retried transfer keeping its age and waiting for the older one that rolled it back: no
    // transfer is starved, so every one commits or is refused by its own condition well before its deadline.
    assert_eq!(outcome.gave_up, 0, "no transfer starved: {outcome:?}");
    assert!(outcome.committed > 0, "{outcome:?}");
    assert!(outcome.plain_ok > 0 && outcome.plain_blocked > 0, "plain writers both wrote and met locks: {outcome:?}");
}
