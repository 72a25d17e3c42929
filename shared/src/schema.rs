//! What the protocol needs to know of a table, read from its `DescribeTable` description: its key, its key types and
//! its index keys (which writes must respect), and the indexes a write is billed for.

use aws_sdk_dynamodb::types::{KeyType, ProjectionType, TableDescription};
use dynamo_saga_expressions::eval::{IndexKey, KeyTypes};

use crate::billing;
use crate::error::TxError;

/// What validation needs to know of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// Partition key name, then the sort key name when there is one.
    pub key_names: Vec<String>,
    /// `S`, `N` or `B` for each key attribute.
    pub key_types: Vec<String>,
    /// Each key attribute of the table's global, then local, secondary indexes, in the order of the table's
    /// description (an index's partition key before its sort key).
    pub index_keys: Vec<IndexKey>,
}

impl TableSchema {
    /// The schema of `table` from its description.
    pub fn of(table: &str, desc: &TableDescription) -> Result<TableSchema, TxError> {
        let mut names = vec![String::new(); 2];
        for k in desc.key_schema() {
            let i = if *k.key_type() == KeyType::Hash { 0 } else { 1 };
            names[i] = k.attribute_name().to_string();
        }
        names.retain(|n| !n.is_empty());
        let type_of = |n: &str| {
            desc.attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == n)
                .map(|d| d.attribute_type().as_str().to_string())
        };
        let types = names
            .iter()
            .map(|n| type_of(n).ok_or_else(|| TxError::Internal(format!("table {table}: no type for key {n}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let global = desc.global_secondary_indexes().iter().map(|g| (g.index_name(), g.key_schema(), false));
        let local = desc.local_secondary_indexes().iter().map(|l| (l.index_name(), l.key_schema(), true));
        let index_keys = global
            .chain(local)
            .flat_map(|(index, keys, local)| keys.iter().map(move |k| (index.unwrap_or_default(), k, local)))
            .filter_map(|(index, k, local)| {
                let kind = type_of(k.attribute_name())?.chars().next()?;
                let key = IndexKey::new(index, k.attribute_name(), kind, *k.key_type() == KeyType::Range);
                Some(if local { key.of_local_index() } else { key })
            })
            .collect();
        Ok(TableSchema { key_names: names, key_types: types, index_keys })
    }

    pub fn partition_key(&self) -> &str {
        &self.key_names[0]
    }

    /// The key and index key types the update evaluator checks writes against.
    pub fn key_types(&self) -> KeyTypes {
        let typed = |n: &String, t: &String| (n.clone(), t.chars().next().unwrap_or('S'));
        KeyTypes {
            key: self.key_names.iter().zip(&self.key_types).map(|(n, t)| typed(n, t)).collect(),
            index_keys: self.index_keys.clone(),
        }
    }
}

/// The global secondary indexes of a table's description, as billing counts a write to them.
pub(crate) fn billed_indexes(desc: &TableDescription) -> Vec<billing::Index> {
    desc.global_secondary_indexes()
        .iter()
        .map(|g| billing::Index {
            keys: g.key_schema().iter().map(|k| k.attribute_name().to_string()).collect(),
            projection: match g.projection().and_then(|p| p.projection_type()) {
                Some(ProjectionType::All) => billing::Projection::All,
                Some(ProjectionType::Include) => billing::Projection::Include(
                    g.projection().map(|p| p.non_key_attributes().to_vec()).unwrap_or_default(),
                ),
                _ => billing::Projection::KeysOnly,
            },
        })
        .collect()
}
