//! The transactions table as the template creates it, created from code: for a library user without a stack, the
//! CLI's `create-table` and the local stack. Keys `id` and `sk` (strings), the sparse `open-transactions` index the
//! sweeper reads (`openShard`, `updatedAt`; keys only), on-demand billing, and time to live on `expiresAt`.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;

use crate::constants::{ATTR_EXPIRES_AT, H_OPEN_SHARD, H_UPDATED_AT, OPEN_INDEX, TX_PK, TX_SK};
use crate::error::TxError;

/// What [`create_transactions_table`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The table was created (and its time to live turned on, when asked).
    Created,
    /// A table of that name existed already: left as it is.
    Existed,
}

/// Creates the transactions table `name` with `client`, as `template.yaml`'s `TransactionsTable` is (keys, index,
/// on-demand billing and, with `ttl`, time to live on `expiresAt`, which deletes finished records after their
/// retention), and waits until it is active; a table of that name that exists is left alone. The caller needs
/// `dynamodb:CreateTable` and `DescribeTable` on it, and `UpdateTimeToLive` with `ttl`. (DynamoDB Local deletes an
/// expired item at once, where DynamoDB takes up to a few days: a test that reads records past their retention wants
/// no time to live.)
pub async fn create_transactions_table(client: &Client, name: &str, ttl: bool) -> Result<Created, TxError> {
    let key = |n: &str, t: KeyType| KeySchemaElement::builder().attribute_name(n).key_type(t).build();
    let def =
        |n: &str, t: ScalarAttributeType| AttributeDefinition::builder().attribute_name(n).attribute_type(t).build();
    let built = |e: aws_sdk_dynamodb::error::BuildError| TxError::Internal(format!("a CreateTable request: {e}"));
    let index = GlobalSecondaryIndex::builder()
        .index_name(OPEN_INDEX)
        .key_schema(key(H_OPEN_SHARD, KeyType::Hash).map_err(built)?)
        .key_schema(key(H_UPDATED_AT, KeyType::Range).map_err(built)?)
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .map_err(built)?;
    let created = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(TX_PK, KeyType::Hash).map_err(built)?)
        .key_schema(key(TX_SK, KeyType::Range).map_err(built)?)
        .attribute_definitions(def(TX_PK, ScalarAttributeType::S).map_err(built)?)
        .attribute_definitions(def(TX_SK, ScalarAttributeType::S).map_err(built)?)
        .attribute_definitions(def(H_OPEN_SHARD, ScalarAttributeType::S).map_err(built)?)
        .attribute_definitions(def(H_UPDATED_AT, ScalarAttributeType::N).map_err(built)?)
        .global_secondary_indexes(index)
        .send()
        .await;
    let failed = |op: &'static str, e: String| TxError::DynamoDb { op, message: e };
    match created {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {
            return Ok(Created::Existed)
        }
        Err(e) => return Err(failed("CreateTable", aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string())),
    }
    for _ in 0..300 {
        let d = client.describe_table().table_name(name).send().await;
        let d = d.map_err(|e| failed("DescribeTable", aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string()))?;
        if d.table().and_then(|t| t.table_status()) == Some(&aws_sdk_dynamodb::types::TableStatus::Active) {
            if !ttl {
                return Ok(Created::Created);
            }
            let ttl = TimeToLiveSpecification::builder().attribute_name(ATTR_EXPIRES_AT).enabled(true).build();
            client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(ttl.map_err(built)?)
                .send()
                .await
                .map_err(|e| {
                    failed("UpdateTimeToLive", aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string())
                })?;
            return Ok(Created::Created);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Err(TxError::Internal(format!("table {name:?} was created but is not active after 5 minutes")))
}
