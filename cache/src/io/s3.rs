//! `s3://BUCKET/PREFIX`: S3-compatible object storage (AWS S3, MinIO, Ceph, Garage,
//! moto…), through the `rust-s3` crate's blocking client (no async runtime).
//!
//! Where and who from the environment, as every S3 tool reads it, never from a manifest:
//! `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (another endpoint than AWS's, addressed
//! path-style as MinIO and moto expect), `AWS_REGION` or `AWS_DEFAULT_REGION` (default
//! `us-east-1`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`,
//! else the profile `AWS_PROFILE` of `~/.aws/credentials`. Every request gives up after
//! `PIPELINE_S3_TIMEOUT` seconds (default 60; one retry), so a dead endpoint is an error
//! in bounded time. Messages name the endpoint and bucket and the key id, never the secret.
//!
//! `create` is a PUT with `If-None-Match: *`, which S3 (since 2024), MinIO and moto
//! answer with 412 when the key exists: the atomic commit of a cache entry. Large files
//! go up as multipart uploads (invisible until completed; [`S3Io::discard_unfinished`]
//! aborts the abandoned ones) and come down in ranges, so no request outlives the timeout.

use super::{CheckpointIo, IoError, Member, Object};
use s3::creds::Credentials;
use s3::{Bucket, Region};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(super) const MEMBER: Member = Member {
    scheme: "s3",
    doc: "S3-compatible object storage, configured by the AWS_* environment variables",
    open: |rest| Ok(Arc::new(S3Io::open(rest)?)),
};

/// Bytes per ranged GET: each request stays well inside the timeout.
const RANGE: u64 = 16 << 20;

/// A bucket and a prefix in it.
pub struct S3Io {
    bucket: Box<Bucket>,
    /// `s3://bucket/prefix`.
    url: String,
    /// Where requests go, for messages.
    endpoint: String,
    /// The access key id (not secret), for messages about refused credentials.
    key_id: Option<String>,
    /// Ends with `/` unless empty.
    prefix: String,
}

impl std::fmt::Debug for S3Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Io")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The first of `names` that is set (and not empty), with its name, for messages.
fn first_env(names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|&n| Some((n, env(n)?)))
}

/// The default request timeout, in seconds.
const DEFAULT_TIMEOUT: f64 = 60.0;

/// The longest request timeout taken, in seconds: a day.
const LONGEST_TIMEOUT: f64 = 86_400.0;

/// The request timeout `PIPELINE_S3_TIMEOUT` gives (`value`; unset: 60 s): seconds, above
/// 0 and at most a day. Anything else is refused, named, rather than read as the default
/// (or, past `u64::MAX` seconds, panicking in `Duration`).
fn request_timeout(value: Option<&str>) -> Result<Duration, String> {
    let Some(value) = value else {
        return Ok(Duration::from_secs_f64(DEFAULT_TIMEOUT));
    };
    match value.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t <= LONGEST_TIMEOUT => Ok(Duration::from_secs_f64(t)),
        _ => Err(format!(
            "PIPELINE_S3_TIMEOUT={} is not a timeout: it takes the seconds a request may \
             take, a number above 0 and at most {LONGEST_TIMEOUT} (a day), such as 60",
            value.escape_debug()
        )),
    }
}

/// The endpoint of `variable`: an `http://` or `https://` URL with a host.
fn endpoint_url(variable: &str, value: &str) -> Result<String, String> {
    let url = value.trim().trim_end_matches('/');
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .map(|rest| rest.split(['/', ':']).next().unwrap_or(""));
    match host {
        Some(host)
            if !host.is_empty() && !host.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(url.to_string())
        }
        _ => Err(format!(
            "{variable}={} is not an endpoint: it takes an http:// or https:// URL with a \
             host, such as http://127.0.0.1:9000",
            value.escape_debug()
        )),
    }
}

/// The `<Code>` of an S3 error body.
fn error_code(body: &str) -> Option<&str> {
    let start = body.find("<Code>")? + "<Code>".len();
    let end = body[start..].find("</Code>")? + start;
    Some(&body[start..end])
}

impl S3Io {
    /// `rest` is `bucket` or `bucket/prefix`.
    pub fn open(rest: &str) -> Result<S3Io, IoError> {
        let url = format!("s3://{rest}");
        let fail = |message: String| IoError {
            place: url.clone(),
            message,
        };
        let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if name.len() < 3
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c))
        {
            return Err(fail(format!(
                "`{name}` is not a bucket name (3 to 63 lower-case letters, digits, `.` and `-`)"
            )));
        }
        let prefix = prefix.trim_matches('/');
        let timeout = request_timeout(env("PIPELINE_S3_TIMEOUT").as_deref()).map_err(&fail)?;
        let (region_variable, region_name) = first_env(&["AWS_REGION", "AWS_DEFAULT_REGION"])
            .unwrap_or(("AWS_REGION", "us-east-1".into()));
        let custom = match first_env(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]) {
            Some((variable, value)) => Some(endpoint_url(variable, &value).map_err(&fail)?),
            None => None,
        };
        let region = match &custom {
            Some(endpoint) => Region::Custom {
                region: region_name.clone(),
                endpoint: endpoint.clone(),
            },
            None => region_name.parse().map_err(|e| {
                fail(format!(
                    "{region_variable}={} is not a region: {e}",
                    region_name.escape_debug()
                ))
            })?,
        };
        let endpoint = match &region {
            Region::Custom { endpoint, .. } => endpoint.clone(),
            other => format!("https://{}", other.host()),
        };
        let place = format!("{url} (endpoint {endpoint})");
        let credentials = Credentials::from_env()
            .or_else(|_| Credentials::from_profile(env("AWS_PROFILE").as_deref()))
            .map_err(|_| IoError {
                place: place.clone(),
                message: "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                          (or a profile in ~/.aws/credentials)"
                    .into(),
            })?;
        let key_id = credentials.access_key.clone();
        let bucket = Bucket::new(name, region, credentials)
            .and_then(|b| b.with_request_timeout(timeout))
            .map_err(|e| IoError {
                place: place.clone(),
                message: e.to_string(),
            })?;
        let bucket = match custom {
            Some(_) => bucket.with_path_style(),
            None => bucket,
        };
        Ok(S3Io {
            bucket,
            url: match prefix {
                "" => format!("s3://{name}"),
                p => format!("s3://{name}/{p}"),
            },
            endpoint,
            key_id,
            prefix: match prefix {
                "" => String::new(),
                p => format!("{p}/"),
            },
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn error(&self, message: String) -> IoError {
        IoError {
            place: self.describe(),
            message,
        }
    }

    /// Why a request failed, in words: the transport's error, or the status and code of
    /// the server's answer.
    fn failed(&self, what: &str, key: &str, e: s3::error::S3Error) -> IoError {
        use s3::error::S3Error;
        match e {
            S3Error::HttpFailWithBody(status, body) => self.refused(what, key, status, &body),
            S3Error::Atto(inner) => self.error(format!(
                "cannot {what} {key}: cannot reach the endpoint: {}",
                inner.to_string().trim_start_matches("Io Error: ")
            )),
            S3Error::Io(inner) => self.error(format!("cannot {what} {key}: {inner}")),
            // An answer that is not what S3 answers (a listing's error body): ask the
            // server once more, plainly, what is wrong.
            other => match self.check() {
                Err(why) => why,
                Ok(()) => self.error(format!("cannot {what} {key}: {other}")),
            },
        }
    }

    /// An answer other than success, in words.
    fn refused(&self, what: &str, key: &str, status: u16, body: &str) -> IoError {
        let code = error_code(body).unwrap_or("");
        let key_id = self.key_id.as_deref().unwrap_or("none");
        let why = match code {
            "NoSuchBucket" => format!("the bucket `{}` does not exist", self.bucket.name()),
            "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken" => format!(
                "the endpoint refused the credentials ({code}; AWS_ACCESS_KEY_ID={key_id})"
            ),
            "AccessDenied" | "AllAccessDisabled" => format!(
                "access denied to the bucket `{}` for AWS_ACCESS_KEY_ID={key_id}",
                self.bucket.name()
            ),
            "" => format!("the endpoint answered HTTP {status}, without an S3 error code: is it an S3 server?"),
            code => format!("the endpoint answered HTTP {status} ({code})"),
        };
        self.error(format!("cannot {what} {key}: {why}"))
    }

    /// The size and ETag of object `key`, `None` when there is none.
    fn head(&self, key: &str) -> Result<Option<(u64, Option<String>)>, IoError> {
        let (head, status) = self
            .bucket
            .head_object(self.full(key))
            .map_err(|e| self.failed("read", key, e))?;
        match status {
            404 => Ok(None),
            200 => Ok(Some((
                head.content_length.unwrap_or(0).max(0) as u64,
                head.e_tag,
            ))),
            status => Err(self.refused("read", key, status, "")),
        }
    }

    /// `Ok` for a 2xx answer, the refusal otherwise.
    fn ok(&self, what: &str, key: &str, status: u16, body: &[u8]) -> Result<(), IoError> {
        match status {
            200..=299 => Ok(()),
            _ => Err(self.refused(what, key, status, &String::from_utf8_lossy(body))),
        }
    }
}

impl CheckpointIo for S3Io {
    fn describe(&self) -> String {
        format!("{} (endpoint {})", self.url, self.endpoint)
    }

    /// A GET of a key that cannot exist: S3 answers `NoSuchKey` when the endpoint, the
    /// bucket and the credentials are all right.
    fn check(&self) -> Result<(), IoError> {
        let response = self
            .bucket
            .get_object(self.full(".pipeline-probe"))
            .map_err(|e| match e {
                s3::error::S3Error::Atto(inner) => self.error(format!(
                    "cannot reach the endpoint: {}",
                    inner.to_string().trim_start_matches("Io Error: ")
                )),
                other => self.error(other.to_string()),
            })?;
        let body = String::from_utf8_lossy(response.as_slice());
        match (response.status_code(), error_code(&body)) {
            (200, _) | (404, Some("NoSuchKey")) => Ok(()),
            (status, _) => Err(IoError {
                message: self
                    .refused("use", "it", status, &body)
                    .message
                    .trim_start_matches("cannot use it: ")
                    .to_string(),
                ..self.error(String::new())
            }),
        }
    }

    fn write(&self, key: &str, mut from: &mut dyn Read) -> Result<(), IoError> {
        let status = self
            .bucket
            .put_object_stream(&mut from, self.full(key))
            .map_err(|e| self.failed("write", key, e))?;
        self.ok("write", key, status, b"")
    }

    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool, IoError> {
        let mut headers = http::HeaderMap::new();
        headers.insert("If-None-Match", http::HeaderValue::from_static("*"));
        let response = self
            .bucket
            .put_object_with_headers(self.full(key), bytes, Some(headers))
            .map_err(|e| self.failed("write", key, e))?;
        match response.status_code() {
            // 409: a concurrent conditional write of the same key is in flight.
            412 | 409 => Ok(false),
            status => self
                .ok("write", key, status, response.as_slice())
                .map(|()| true),
        }
    }

    fn read(&self, key: &str, to: &mut dyn Write) -> Result<bool, IoError> {
        let Some(size) = self.size(key)? else {
            return Ok(false);
        };
        let mut start = 0;
        while start < size {
            let end = (start + RANGE).min(size) - 1;
            let response = self
                .bucket
                .get_object_range(self.full(key), start, Some(end))
                .map_err(|e| self.failed("read", key, e))?;
            self.ok("read", key, response.status_code(), response.as_slice())?;
            let bytes = response.as_slice();
            if bytes.len() as u64 != end - start + 1 {
                return Err(self.error(format!(
                    "cannot read {key}: bytes {start}–{end} came back as {} bytes (it changed while read?)",
                    bytes.len()
                )));
            }
            to.write_all(bytes)
                .map_err(|e| self.error(format!("cannot read {key}: {e}")))?;
            start = end + 1;
        }
        Ok(true)
    }

    fn size(&self, key: &str) -> Result<Option<u64>, IoError> {
        Ok(self.head(key)?.map(|(size, _)| size))
    }

    fn version(&self, key: &str) -> Result<Option<String>, IoError> {
        Ok(self
            .head(key)?
            .map(|(size, etag)| format!("{size} bytes, ETag {}", etag.unwrap_or_default())))
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, IoError> {
        let pages = self
            .bucket
            .list(self.full(prefix), None)
            .map_err(|e| self.failed("list", &format!("{prefix}*"), e))?;
        let mut found: Vec<Object> = pages
            .into_iter()
            .flat_map(|page| page.contents)
            .filter_map(|o| {
                Some(Object {
                    key: o.key.strip_prefix(&self.prefix)?.to_string(),
                    size: o.size,
                    modified: httpdate(&o.last_modified),
                })
            })
            .collect();
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), IoError> {
        let response = self
            .bucket
            .delete_object(self.full(key))
            .map_err(|e| self.failed("delete", key, e))?;
        match response.status_code() {
            404 => Ok(()),
            status => self.ok("delete", key, status, response.as_slice()),
        }
    }

    fn discard_unfinished(&self, before: SystemTime) -> Result<usize, IoError> {
        let pages = self
            .bucket
            .list_multiparts_uploads(Some(&self.prefix), None)
            .map_err(|e| self.failed("list", "the unfinished uploads", e))?;
        let mut discarded = 0;
        for upload in pages.into_iter().flat_map(|p| p.uploads) {
            if httpdate(&upload.initiated).is_some_and(|t| t < before) {
                self.bucket
                    .abort_upload(&upload.key, &upload.id)
                    .map_err(|e| self.failed("discard", &upload.key, e))?;
                discarded += 1;
            }
        }
        Ok(discarded)
    }
}

/// An ISO 8601 UTC time as S3 lists them (`2026-12-03T11:36:21.000Z`).
fn httpdate(text: &str) -> Option<SystemTime> {
    let (date, time) = text.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss: f64 = t.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + hh * 3600 + mm * 60;
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?);
    Some(t + Duration::from_secs_f64(ss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_times() {
        let t = httpdate("2026-12-03T11:36:21.500Z").unwrap();
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert_eq!(secs, 1796297781.5);
        assert_eq!(
            httpdate("1970-01-01T00:00:00.000Z"),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(httpdate("yesterday"), None);
    }

    #[test]
    fn error_codes_of_answers() {
        let body =
            "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>x</Message></Error>";
        assert_eq!(error_code(body), Some("NoSuchBucket"));
        assert_eq!(error_code(""), None);
    }

    #[test]
    fn bucket_names_are_checked_before_any_request() {
        let e = S3Io::open("A_b/prefix").unwrap_err();
        assert_eq!(e.place, "s3://A_b/prefix");
        assert!(
            e.message.starts_with("`A_b` is not a bucket name"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_timeout_is_seconds_above_zero_and_at_most_a_day() {
        assert_eq!(request_timeout(None), Ok(Duration::from_secs(60)));
        assert_eq!(request_timeout(Some("1")), Ok(Duration::from_secs(1)));
        assert_eq!(
            request_timeout(Some(" 0.5 ")),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            request_timeout(Some("86400")),
            Ok(Duration::from_secs(86_400))
        );
        // Past `u64::MAX` seconds `Duration::from_secs_f64` panics; the rest were taken
        // as the default, silently.
        for bad in [
            "1e30",
            "1e19",
            "18446744073709551616",
            "0",
            "-1",
            "abc",
            "inf",
            "NaN",
            "86401",
        ] {
            let e = request_timeout(Some(bad)).unwrap_err();
            assert!(
                e.starts_with(&format!("PIPELINE_S3_TIMEOUT={bad} is not a timeout")),
                "{e}"
            );
            assert!(e.contains("above 0 and at most 86400"), "{e}");
        }
        let e = request_timeout(Some("\u{1b}[2J")).unwrap_err();
        assert!(e.starts_with("PIPELINE_S3_TIMEOUT=\\u{1b}[2J "), "{e}");
    }

    #[test]
    fn endpoints_are_http_urls_with_a_host() {
        assert_eq!(
            endpoint_url("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"),
            Ok("http://127.0.0.1:9000".into())
        );
        assert_eq!(
            endpoint_url("AWS_ENDPOINT_URL_S3", "https://s3.example.com"),
            Ok("https://s3.example.com".into())
        );
        for bad in [
            "127.0.0.1:9000",
            "ftp://host",
            "http://",
            "http://:9000",
            "http://a b",
        ] {
            let e = endpoint_url("AWS_ENDPOINT_URL", bad).unwrap_err();
            assert!(
                e.starts_with(&format!("AWS_ENDPOINT_URL={bad} is not an endpoint")),
                "{e}"
            );
        }
    }
}
