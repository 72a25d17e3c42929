//! What the protocol needs to know of a table, read from its `DescribeTable` description: its key, its key types and
//! its index keys (which writes must respect), and the indexes a write is billed for.

use aws_sdk_dynamodb::types::{KeyType, MultiRegionConsistency, ProjectionType, TableDescription};
use dynamo_saga_expressions::eval::{IndexKey, KeyTypes};

use crate::config::{Config, MultiRegion};
use crate::constants::{ENV_EVENTUAL_REGION, ENV_MULTI_REGION};
use crate::error::TxError;
use crate::model::billing;

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

/// How a table is replicated, as its description says: `Replicas` and `MultiRegionConsistency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// A table of one Region.
    Regional,
    /// A global table with multi-Region eventual consistency (MREC), with its replicas' Regions.
    Eventual(Vec<String>),
    /// A global table with multi-Region strong consistency (MRSC), with its replicas' Regions.
    Strong(Vec<String>),
}

impl Replication {
    pub fn of(desc: &TableDescription) -> Replication {
        let regions: Vec<String> = desc.replicas().iter().filter_map(|r| r.region_name().map(str::to_owned)).collect();
        match desc.multi_region_consistency() {
            Some(MultiRegionConsistency::Strong) => Replication::Strong(regions),
            _ if regions.is_empty() => Replication::Regional,
            _ => Replication::Eventual(regions),
        }
    }

    /// Whether a store configured as `cfg`, its client in `region`, may drive transactions on `table`; the error
    /// says why not, and what setting would allow it. An MRSC table needs [`MultiRegion::Strong`], as it takes no
    /// `TransactWriteItems`. An MREC table checks a condition against one Region's replica only and resolves
    /// conflicting writes by last writer wins, so a lock taken in two Regions at once would be taken twice: it is
    /// driven only from the Region [`Config::eventual_region`] names, where it is a table of one Region (AWS's advice
    /// for writes that need conditions or transactions).
    pub fn admits(&self, table: &str, cfg: &Config, region: Option<&str>) -> Result<(), TxError> {
        let here = region.unwrap_or("(no Region)");
        match self {
            Replication::Regional => Ok(()),
            Replication::Strong(_) if cfg.multi_region == MultiRegion::Strong => Ok(()),
            Replication::Strong(regions) => Err(TxError::invalid(
                None,
                format!(
                    "table {table:?} is a global table with multi-Region strong consistency ({}), which takes no \
                     TransactWriteItems: run dynamo-saga with {ENV_MULTI_REGION}=strong (the template's \
                     MultiRegionConsistency=STRONG)",
                    regions.join(", ")
                ),
            )),
            Replication::Eventual(regions) => match cfg.eventual_region.as_deref() {
                Some(pinned) if Some(pinned) == region => Ok(()),
                Some(pinned) => Err(TxError::invalid(
                    None,
                    format!(
                        "table {table:?} is a global table with multi-Region eventual consistency ({}): only \
                         {pinned} ({ENV_EVENTUAL_REGION}) drives transactions on it, and this is {here}; send the \
                         transaction to {pinned}",
                        regions.join(", ")
                    ),
                )),
                None => Err(TxError::invalid(
                    None,
                    format!(
                        "table {table:?} is a global table with multi-Region eventual consistency ({}): a condition \
                         there is checked against one Region's replica and conflicting writes resolve by last writer \
                         wins, so two Regions could both lock one item; name the one Region that drives transactions \
                         on it ({ENV_EVENTUAL_REGION}, the template's EventualConsistencyRegion) and send them there",
                        regions.join(", ")
                    ),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::{MultiRegionConsistency, ReplicaDescription, TableDescription};

    use super::Replication;
    use crate::config::Config;

    fn desc(regions: &[&str], consistency: Option<MultiRegionConsistency>) -> TableDescription {
        let mut d = TableDescription::builder();
        for r in regions {
            d = d.replicas(ReplicaDescription::builder().region_name(*r).build());
        }
        if let Some(c) = consistency {
            d = d.multi_region_consistency(c);
        }
        d.build()
    }

    #[test]
    fn a_table_says_how_it_is_replicated() {
        assert_eq!(Replication::of(&desc(&[], None)), Replication::Regional);
        let two = ["us-east-1", "us-east-2"];
        assert_eq!(Replication::of(&desc(&two, None)), Replication::Eventual(vec![two[0].into(), two[1].into()]));
        assert_eq!(
            Replication::of(&desc(&two, Some(MultiRegionConsistency::Eventual))),
            Replication::Eventual(vec![two[0].into(), two[1].into()])
        );
        assert_eq!(
            Replication::of(&desc(&two, Some(MultiRegionConsistency::Strong))),
            Replication::Strong(vec![two[0].into(), two[1].into()])
        );
    }

    #[test]
    fn strong_tables_need_the_strong_mode_and_eventual_ones_a_pinned_region() {
        let plain = Config::new("tx");
        let strong = Config::new("tx").with_strong_multi_region();
        let regions = vec!["us-east-1".to_string(), "us-west-2".to_string()];
        let here = Some("us-east-1");
        assert!(Replication::Regional.admits("T", &plain, here).is_ok());
        assert!(Replication::Regional.admits("T", &strong, here).is_ok(), "the protocol's writes work on any table");
        let e = Replication::Strong(regions.clone()).admits("T", &plain, here).unwrap_err();
        assert_eq!(e.name(), "ValidationError");
        assert!(e.to_string().contains("SAGA_MULTI_REGION_CONSISTENCY=strong"), "{e}");
        assert!(Replication::Strong(regions.clone()).admits("T", &strong, here).is_ok());
        for cfg in [&plain, &strong] {
            let e = Replication::Eventual(regions.clone()).admits("T", cfg, here).unwrap_err();
            assert!(
                e.to_string().contains("last writer") && e.to_string().contains("SAGA_EVENTUAL_CONSISTENCY_REGION"),
                "{e}"
            );
        }
        let mut pinned = Config::new("tx");
        pinned.eventual_region = Some("us-east-1".into());
        assert!(Replication::Eventual(regions.clone()).admits("T", &pinned, here).is_ok());
        let e = Replication::Eventual(regions).admits("T", &pinned, Some("us-west-2")).unwrap_err();
        assert!(e.to_string().contains("only us-east-1") && e.to_string().contains("this is us-west-2"), "{e}");
    }
}
