//! TensorBoard event files (`events.out.tfevents.*`): the format TensorBoard's
//! `SummaryWriter` writes and its readers take, so that a run's scalars and
//! hyper-parameters open in the TensorBoard every PyTorch user already has.
//!
//! A file is a sequence of records, each `u64` little-endian length, the masked CRC-32C of
//! those 8 bytes, the data, and the masked CRC-32C of the data; each record's data is an
//! `Event` protobuf. The first event says `file_version: "brain.Event:2"`. Scalars are
//! `Summary.Value.simple_value` (a float32); hyper-parameters are the HParams plugin's
//! three summaries (`_hparams_/experiment`, `…/session_start_info`,
//! `…/session_end_info`), so that runs compare in TensorBoard's HParams tab.
//!
//! The messages are written by hand with `prost`'s derive (the field numbers of
//! TensorBoard's `event.proto`, `summary.proto` and `plugins/hparams/{api,plugin_data}.proto`),
//! so no `protoc` is needed to build. No crate fitted: `tensorboard-rs` is unmaintained and
//! leaves hyper-parameters `unimplemented!()`, `tboard` needs `protoc`, and `tfrecord`
//! writes no file-version record.

use prost::Message;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `tensorflow.Event` (event.proto): fields 1, 2, 3 and 5.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary` (summary.proto).
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a tag, its metadata, and a float32 or a tensor.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "Value", tags = "2, 8")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// `tensorflow.TensorProto`, as far as the HParams plugin's empty tensor needs: a dtype
/// and a shape.
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
}

/// `tensorflow.TensorShapeProto`: its dimensions.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// `tensorflow.SummaryMetadata`: which plugin a summary is for, and what it holds.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorboard.hparams.HParamsPluginData` (plugin_data.proto); version 0.
#[derive(Clone, PartialEq, Message)]
pub struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    pub version: i32,
    #[prost(oneof = "HParamsData", tags = "2, 3, 4")]
    pub data: Option<HParamsData>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum HParamsData {
    #[prost(message, tag = "2")]
    Experiment(Experiment),
    #[prost(message, tag = "3")]
    SessionStartInfo(SessionStartInfo),
    #[prost(message, tag = "4")]
    SessionEndInfo(SessionEndInfo),
}

/// `tensorboard.hparams.Experiment` (api.proto): the hyper-parameters and metrics shown.
#[derive(Clone, PartialEq, Message)]
pub struct Experiment {
    #[prost(message, repeated, tag = "4")]
    pub hparam_infos: Vec<HParamInfo>,
    #[prost(message, repeated, tag = "5")]
    pub metric_infos: Vec<MetricInfo>,
}

#[derive(Clone, PartialEq, Message)]
pub struct HParamInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    /// `DataType`: 1 string, 2 bool, 3 float64.
    #[prost(int32, tag = "4")]
    pub r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct MetricInfo {
    #[prost(message, optional, tag = "1")]
    pub name: Option<MetricName>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MetricName {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(string, tag = "2")]
    pub tag: String,
}

/// `tensorboard.hparams.SessionStartInfo`: this run's hyper-parameters.
#[derive(Clone, PartialEq, Message)]
pub struct SessionStartInfo {
    #[prost(map = "string, message", tag = "1")]
    pub hparams: std::collections::HashMap<String, prost_types::Value>,
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

/// `tensorboard.hparams.SessionEndInfo`: how the run ended.
#[derive(Clone, PartialEq, Message)]
pub struct SessionEndInfo {
    /// `Status`: 1 success, 2 failure.
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(double, tag = "2")]
    pub end_time_secs: f64,
}

/// A hyper-parameter's value, as the HParams plugin types them.
#[derive(Debug, Clone, PartialEq)]
pub enum HParam {
    Text(String),
    Bool(bool),
    Number(f64),
}

impl HParam {
    fn data_type(&self) -> i32 {
        match self {
            HParam::Text(_) => 1,
            HParam::Bool(_) => 2,
            HParam::Number(_) => 3,
        }
    }

    fn value(&self) -> prost_types::Value {
        use prost_types::value::Kind;
        prost_types::Value {
            kind: Some(match self {
                HParam::Text(s) => Kind::StringValue(s.clone()),
                HParam::Bool(b) => Kind::BoolValue(*b),
                HParam::Number(x) => Kind::NumberValue(*x),
            }),
        }
    }
}

/// The CRC-32C of `bytes`, masked as TFRecord masks it (rotated right by 15 bits, plus a
/// constant), so that a CRC of data holding CRCs stays well distributed.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// One record of a TFRecord file: length, its masked CRC, data, its masked CRC.
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The events of a file of records; an error names the first record that is torn or
/// whose checksum does not match (what a killed writer leaves is its last record torn).
pub fn read_events(bytes: &[u8]) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let n = events.len() + 1;
        let head = bytes
            .get(at..at + 12)
            .ok_or(format!("record {n} is torn"))?;
        let (len, crc) = head.split_at(8);
        if masked_crc(len).to_le_bytes() != crc {
            return Err(format!(
                "record {n}: its length does not match its checksum"
            ));
        }
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let data = bytes
            .get(at + 12..at + 12 + len)
            .ok_or(format!("record {n} is torn"))?;
        let crc = bytes
            .get(at + 12 + len..at + 16 + len)
            .ok_or(format!("record {n} is torn"))?;
        if masked_crc(data).to_le_bytes() != crc {
            return Err(format!("record {n}: its data does not match its checksum"));
        }
        events.push(Event::decode(data).map_err(|e| format!("record {n}: {e}"))?);
        at += 16 + len;
    }
    Ok(events)
}

/// Writes one event file in a directory, as TensorBoard's `SummaryWriter` does.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// A new file in `dir` (created if missing), named as TensorBoard names them
    /// (`events.out.tfevents.SECONDS.HOST.PID.N`, the first `N` free), that starts with
    /// the file-version event.
    pub fn create(dir: &Path, wall_time: f64) -> io::Result<EventWriter> {
        std::fs::create_dir_all(dir)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty() && !h.contains('/'))
            .unwrap_or_else(|| "localhost".into());
        let (path, file) = (0..)
            .map(|n| {
                let name = format!(
                    "events.out.tfevents.{:010}.{host}.{}.{n}",
                    wall_time as u64,
                    std::process::id()
                );
                let path = dir.join(name);
                (
                    File::options().create_new(true).write(true).open(&path),
                    path,
                )
            })
            .find_map(|(file, path)| match file {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
                file => Some(file.map(|f| (path, f))),
            })
            .expect("an endless range")?;
        let mut writer = EventWriter {
            path,
            out: BufWriter::new(file),
        };
        writer.write(&Event {
            wall_time,
            step: 0,
            what: Some(What::FileVersion("brain.Event:2".into())),
        })?;
        Ok(writer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, event: &Event) -> io::Result<()> {
        self.out.write_all(&record(&event.encode_to_vec()))
    }

    /// Scalars at one step, by tag (float32, as TensorBoard keeps them).
    pub fn scalars(&mut self, step: u64, wall_time: f64, values: &[(&str, f64)]) -> io::Result<()> {
        let value = values
            .iter()
            .map(|(tag, x)| SummaryValue {
                tag: tag.to_string(),
                metadata: None,
                value: Some(Value::SimpleValue(*x as f32)),
            })
            .collect();
        self.write(&Event {
            wall_time,
            step: step as i64,
            what: Some(What::Summary(Summary { value })),
        })
    }

    /// The run's hyper-parameters and the metrics to show beside them (tags of scalars
    /// this file holds) in TensorBoard's HParams tab: the experiment and the session's
    /// start. [`EventWriter::hparams_end`] closes the session.
    pub fn hparams(
        &mut self,
        hparams: &BTreeMap<String, HParam>,
        metrics: &[&str],
        wall_time: f64,
    ) -> io::Result<()> {
        let experiment = Experiment {
            hparam_infos: hparams
                .iter()
                .map(|(name, v)| HParamInfo {
                    name: name.clone(),
                    r#type: v.data_type(),
                })
                .collect(),
            metric_infos: metrics
                .iter()
                .map(|tag| MetricInfo {
                    name: Some(MetricName {
                        group: String::new(),
                        tag: tag.to_string(),
                    }),
                })
                .collect(),
        };
        self.plugin(
            "_hparams_/experiment",
            HParamsData::Experiment(experiment),
            wall_time,
        )?;
        let start = SessionStartInfo {
            hparams: hparams
                .iter()
                .map(|(k, v)| (k.clone(), v.value()))
                .collect(),
            start_time_secs: wall_time,
        };
        self.plugin(
            "_hparams_/session_start_info",
            HParamsData::SessionStartInfo(start),
            wall_time,
        )
    }

    /// Ends the HParams session: succeeded or failed.
    pub fn hparams_end(&mut self, succeeded: bool, wall_time: f64) -> io::Result<()> {
        let end = SessionEndInfo {
            status: if succeeded { 1 } else { 2 },
            end_time_secs: wall_time,
        };
        self.plugin(
            "_hparams_/session_end_info",
            HParamsData::SessionEndInfo(end),
            wall_time,
        )
    }

    /// One summary of the HParams plugin: its data in the metadata, with the empty float
    /// tensor TensorBoard's own writer puts beside it.
    fn plugin(&mut self, tag: &str, data: HParamsData, wall_time: f64) -> io::Result<()> {
        let content = HParamsPluginData {
            version: 0,
            data: Some(data),
        }
        .encode_to_vec();
        let value = SummaryValue {
            tag: tag.into(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: "hparams".into(),
                    content,
                }),
            }),
            // DT_FLOAT, shape [0].
            value: Some(Value::Tensor(TensorProto {
                dtype: 1,
                tensor_shape: Some(TensorShape {
                    dim: vec![Dim { size: 0 }],
                }),
            })),
        };
        self.write(&Event {
            wall_time,
            step: 0,
            what: Some(What::Summary(Summary { value: vec![value] })),
        })
    }

    /// Writes what is buffered to the file (a reader sees every event before it).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_castagnolis_and_masked_as_tfrecord_masks_it() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // TensorBoard's own `record_writer.masked_crc32c` of the same bytes, and of a
        // record's length field.
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc(&24u64.to_le_bytes()), 0x224b_7fa3);
    }

    #[test]
    fn the_empty_float_tensor_is_the_bytes_tensorboard_writes() {
        let t = TensorProto {
            dtype: 1,
            tensor_shape: Some(TensorShape {
                dim: vec![Dim { size: 0 }],
            }),
        };
        assert_eq!(t.encode_to_vec(), [0x08, 0x01, 0x12, 0x02, 0x12, 0x00]);
    }

    #[test]
    fn events_read_back_and_a_torn_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path(), 1_700_000_000.5).unwrap();
        w.scalars(3, 1_700_000_001.0, &[("loss", 0.25), ("lr", 1e-3)])
            .unwrap();
        w.flush().unwrap();
        let name = w.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("events.out.tfevents.1700000000."),
            "{name}"
        );
        let bytes = std::fs::read(w.path()).unwrap();
        let events = read_events(&bytes).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        assert_eq!(events[1].step, 3);
        let Some(What::Summary(s)) = &events[1].what else {
            panic!("{:?}", events[1]);
        };
        assert_eq!(s.value[0].tag, "loss");
        assert_eq!(s.value[0].value, Some(Value::SimpleValue(0.25)));
        assert_eq!(s.value[1].value, Some(Value::SimpleValue(1e-3f32)));
        let torn = &bytes[..bytes.len() - 3];
        assert_eq!(read_events(torn).unwrap_err(), "record 2 is torn");
        let mut flipped = bytes.clone();
        let last = flipped.len() - 6;
        flipped[last] ^= 1;
        assert_eq!(
            read_events(&flipped).unwrap_err(),
            "record 2: its data does not match its checksum"
        );
    }
}
