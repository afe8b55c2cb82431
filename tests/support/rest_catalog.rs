//! An Apache Iceberg REST catalog the lake tests keep in step with the tables, started on a
//! free loopback port and stopped by pid (`tests/fixtures/rest_catalog.py`).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;

use super::peers::{free_port, Peer};

/// An Apache Iceberg REST catalog on 127.0.0.1 (`tests/fixtures/rest_catalog.py`: the REST
/// API over pyiceberg's SQL catalog on SQLite, pyiceberg deciding every commit).
pub struct IcebergRestCatalog {
    /// The process (stopped by pid when dropped).
    _peer: Peer,
    /// Its port.
    pub port: u16,
    dir: tempfile::TempDir,
}

impl IcebergRestCatalog {
    /// Starts a catalog with an empty database.
    pub fn start() -> IcebergRestCatalog {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let mut command = Command::new(super::lake::python());
        command
            .arg(super::repo_root().join("tests/fixtures/rest_catalog.py"))
            .arg(port.to_string())
            .arg(dir.path().join("catalog.db"))
            .arg(format!("file://{}", dir.path().display()));
        let peer = Peer::spawn(command, "the REST catalog", port);
        IcebergRestCatalog {
            _peer: peer,
            port,
            dir,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its SQLite database, for pyiceberg's SQL catalog on the same entries.
    pub fn database(&self) -> PathBuf {
        self.dir.path().join("catalog.db")
    }

    /// The next `count` requests answer 503 (`down`), or the next `count` commits 409
    /// (`fail-commits`).
    pub fn fault(&self, fault: &str, count: u32) {
        use std::io::{Read, Write};
        let body = count.to_string();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            stream,
            "POST /test/{fault} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        assert!(
            answer.lines().next().is_some_and(|l| l.contains(" 200 ")),
            "{answer}"
        );
    }
}
