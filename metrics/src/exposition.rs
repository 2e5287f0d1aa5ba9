//! What servers and mounts need to put their counters into a
//! `prometheus-client` collector (the crate writes the exposition text):
//! values read at scrape time, never kept twice. Each counter already
//! lives in an atomic the hot path adds to; a scrape reads it and hands the
//! crate a constant, so serving `/metrics` adds nothing to a request's cost.

use std::fmt;

pub use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::{
    prometheus_text, EncodeGaugeValue, EncodeLabelValue, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
pub use prometheus_client::registry::{Registry, Unit};

use crate::Snapshot;

/// `registry`'s metrics in the Prometheus text format (0.0.4), what a
/// scrape is answered with.
pub fn text(registry: &Registry) -> Result<String, fmt::Error> {
    let mut text = String::new();
    prometheus_text::encode(&mut text, registry)?;
    Ok(text)
}

/// The content type of [`text`].
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A counter (`_total` is added to `name`) of `value`.
pub fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: u64,
) -> fmt::Result {
    ConstCounter::new(value).encode(enc.encode_descriptor(name, help, unit, MetricType::Counter)?)
}

/// A gauge of `value`.
pub fn gauge<N: EncodeGaugeValue + fmt::Debug>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: N,
) -> fmt::Result {
    ConstGauge::new(value).encode(enc.encode_descriptor(name, help, unit, MetricType::Gauge)?)
}

/// A family of metrics of one type told apart by one label: `members`
/// gives each one's label value and metric.
pub fn by_label<V, M>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    label: &str,
    members: impl IntoIterator<Item = (V, M)>,
) -> fmt::Result
where
    V: EncodeLabelValue,
    M: EncodeMetric + TypedMetric,
{
    let mut family = enc.encode_descriptor(name, help, unit, M::TYPE)?;
    for (value, metric) in members {
        metric.encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

/// Counters of `value`s by label, for [`by_label`].
pub fn counters<V>(
    members: impl IntoIterator<Item = (V, u64)>,
) -> impl Iterator<Item = (V, ConstCounter)> {
    members.into_iter().map(|(v, n)| (v, ConstCounter::new(n)))
}

/// Gauges of `value`s by label, for [`by_label`].
pub fn gauges<V>(
    members: impl IntoIterator<Item = (V, u64)>,
) -> impl Iterator<Item = (V, ConstGauge<u64>)> {
    members.into_iter().map(|(v, n)| (v, ConstGauge::new(n)))
}

/// A histogram as a scrape finds it: the sum of the observations in
/// seconds, their count, and per bucket its upper bound in seconds and the
/// observations in it alone (the crate makes them cumulative); the last
/// bucket's bound is infinity.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramReading {
    pub sum: f64,
    pub count: u64,
    pub buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for HistogramReading {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl TypedMetric for HistogramReading {
    const TYPE: MetricType = MetricType::Histogram;
}

/// The powers of two of nanoseconds a [`Snapshot`]'s reading has bounds
/// at: 1.024 µs to 34.4 s. Each is a bucket boundary of the log-linear
/// histogram, so the counts are exact; 26 buckets, not its 1,024, keep a
/// scrape small while `histogram_quantile` stays within a factor of two.
const READING_BOUNDS: std::ops::RangeInclusive<u32> = 10..=35;

impl Snapshot {
    /// This histogram of waits in the form Prometheus reads.
    pub fn reading(&self) -> HistogramReading {
        let mut buckets = Vec::with_capacity(READING_BOUNDS.count() + 1);
        let mut below = 0;
        for e in READING_BOUNDS {
            let end = crate::bucket_of(1 << e);
            buckets.push(((1u64 << e) as f64 / 1e9, self.hist[below..end].iter().sum()));
            below = end;
        }
        buckets.push((f64::INFINITY, self.hist[below..].iter().sum()));
        HistogramReading {
            sum: self.total_ns as f64 / 1e9,
            count: self.calls,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_as_power_of_two_buckets() {
        let h = crate::Histogram::new();
        h.record(1_000); // under 1.024 µs
        h.record(1_024); // the next bucket: bounds are exclusive here
        h.record(3_000_000);
        h.record(u64::MAX / 2);
        let r = h.snapshot().reading();
        assert_eq!(r.count, 4);
        assert_eq!(r.buckets.len(), 27);
        assert_eq!(r.buckets[0], (1.024e-6, 1));
        assert_eq!(r.buckets[1], (2.048e-6, 1));
        let ms = r
            .buckets
            .iter()
            .position(|b| b.1 == 1 && b.0 > 2e-3)
            .unwrap();
        assert_eq!(r.buckets[ms].0, (1u64 << 22) as f64 / 1e9);
        assert_eq!(r.buckets[26], (f64::INFINITY, 1));
        assert_eq!(r.buckets.iter().map(|b| b.1).sum::<u64>(), 4);
    }

    #[test]
    fn families_are_written_in_the_prometheus_text_format() {
        #[derive(Debug)]
        struct Two;
        impl Collector for Two {
            fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
                counter(&mut enc, "syncs", "Syncs.", None, 3)?;
                by_label(
                    &mut enc,
                    "requests",
                    "Requests.",
                    None,
                    "op",
                    counters([("lookup", 5), ("mkdir", 1)]),
                )
            }
        }
        let mut registry = Registry::with_prefix("shoal");
        registry.register_collector(Box::new(Two));
        let text = text(&registry).unwrap();
        assert!(
            text.contains("# TYPE shoal_syncs_total counter\nshoal_syncs_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("shoal_requests_total{op=\"lookup\"} 5\n"),
            "{text}"
        );
    }
}
