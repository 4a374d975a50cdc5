//! moto's S3 server (PyPI `moto[server]`, installed into `.venv` by
//! `./test.sh`) as a child process on a free loopback port, for the tests
//! of `s3://` warehouses: buckets, the settings to reach it, the objects
//! under a location.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use icemerge_executor::cleanup::s3_operator;
use icemerge_scheduler::S3Options;

use crate::python;

/// moto's S3 server, killed when dropped.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP request to moto; returns the status code.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad HTTP response: {response:.200}")))
}

/// Starts moto's S3 server on a free loopback port and waits until it
/// answers.
pub fn start_moto() -> Moto {
    let port = free_port();
    let child = Command::new(python())
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start moto's S3 server (pip install 'moto[server]'; ./test.sh does): {e}"
            )
        });
    let mut moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    loop {
        if let Ok(200) = http(port, "GET", "/") {
            return moto;
        }
        if let Ok(Some(status)) = moto.child.try_wait() {
            panic!(
                "moto's S3 server exited at start ({status}): is moto[server] installed in {}?",
                python().display()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "moto's S3 server did not answer on port {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Moto {
    pub fn port(&self) -> u16 {
        self.endpoint.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Creates bucket `bucket`.
    pub fn create_bucket(&self, bucket: &str) {
        assert_eq!(
            http(self.port(), "PUT", &format!("/{bucket}")).unwrap(),
            200
        );
    }

    /// The settings of a warehouse on this server.
    pub fn s3_options(&self) -> S3Options {
        S3Options {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            access_key_id: Some("icemerge-test".into()),
            secret_access_key: Some("icemerge-test-secret".into()),
            session_token: None,
            path_style_access: None,
        }
    }

    /// Every object key under `location` (`s3://bucket/prefix`).
    pub async fn objects(&self, location: &str) -> BTreeSet<String> {
        let (operator, root) = s3_operator(location, &self.s3_options().file_io_props()).unwrap();
        let entries = operator
            .lister_with(&format!("{root}/"))
            .recursive(true)
            .await
            .unwrap();
        let entries: Vec<_> = entries.try_collect().await.unwrap();
        entries
            .into_iter()
            .filter(|e| e.metadata().is_file())
            .map(|e| e.path().to_string())
            .collect()
    }
}
