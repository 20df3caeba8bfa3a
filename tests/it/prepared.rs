//! Prepared statements (`DATABASE_PREPARED_STATEMENTS`, decision 0014): on a direct
//! connection the store parses and plans each statement once, not on every call, and a
//! statement prepared before a migration still runs after it. The suite's direct pass runs
//! every store with them on, the PgBouncer pass with them off (`TestDb::config`).

use std::sync::{Arc, Mutex};

use integration_tests::TestDb;
use notify_core::store::{JobStore, SuppressionStore};
use notify_postgres::PgStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

/// The text of every Parse message the clients sent through a forwarder to the server.
#[derive(Clone, Default)]
struct Parses(Arc<Mutex<Vec<String>>>);

impl Parses {
    /// How many Parse messages carried `sql`.
    fn of(&self, sql: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|q| *q == sql).count()
    }
}

/// A forwarder to the test server that reads the frontend's messages on their way (the
/// protocol's framing: a startup packet, then a type byte and a length per message) and keeps
/// each Parse's query text. It declines TLS, so the stream stays readable.
async fn parse_counter(upstream: (String, u16)) -> (u16, Parses) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let parses = Parses::default();
    let seen = parses.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
                continue;
            };
            tokio::spawn(relay(inbound, outbound, seen.clone()));
        }
    });
    (port, parses)
}

async fn relay(mut inbound: TcpStream, mut outbound: TcpStream, parses: Parses) {
    // the startup packet (untyped), after declining TLS or GSS encryption if asked
    let startup = loop {
        let Some(packet) = untyped(&mut inbound).await else {
            return;
        };
        let code = packet.get(4..8).map(be32);
        if packet.len() == 8 && matches!(code, Some(80_877_103 | 80_877_104)) {
            if inbound.write_all(b"N").await.is_err() {
                return;
            }
            continue;
        }
        break packet;
    };
    if outbound.write_all(&startup).await.is_err() {
        return;
    }
    let (mut from_client, mut to_client) = inbound.into_split();
    let (mut from_server, mut to_server) = outbound.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        // whole messages (a type byte, then a length that counts itself); the rest waits
        while let Some(len) = pending.get(1..5).map(|b| be32(b) as usize) {
            if pending.len() < 1 + len {
                break;
            }
            let frame: Vec<u8> = pending.drain(..1 + len).collect();
            if frame[0] == b'P' {
                // Parse: the statement's name, then its query, each ending in a zero byte
                let mut fields = frame[5..].split(|b| *b == 0);
                if let (Some(_name), Some(query)) = (fields.next(), fields.next()) {
                    let query = String::from_utf8_lossy(query).into_owned();
                    parses.0.lock().unwrap().push(query);
                }
            }
            if to_server.write_all(&frame).await.is_err() {
                break 'read;
            }
        }
    }
    back.abort();
}

/// One untyped packet (a length that counts itself, then the rest).
async fn untyped(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.ok()?;
    let total = be32(&len) as usize;
    let mut packet = len.to_vec();
    packet.resize(total.max(4), 0);
    stream.read_exact(&mut packet[4..]).await.ok()?;
    Some(packet)
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// A store on the test database through a Parse counter.
async fn counted_store(db: &TestDb, prepared: bool) -> (PgStore, Parses) {
    let (port, parses) = parse_counter(db.direct.host_port()).await;
    let config = db
        .direct
        .with_host_port("127.0.0.1", port)
        .with_prepared_statements(prepared);
    (PgStore::connect(config).await.unwrap(), parses)
}

#[tokio::test]
async fn with_prepared_statements_each_statement_is_parsed_once_per_connection() {
    let db = TestDb::new().await;
    let org = Uuid::new_v4();
    let get_job = notify_postgres::sql::GET_JOB.sql;
    for (prepared, parsed) in [(true, 1), (false, 10)] {
        let (store, parses) = counted_store(&db, prepared).await;
        for _ in 0..10 {
            assert!(store.get(org, Uuid::now_v7()).await.unwrap().is_none());
        }
        assert_eq!(
            parses.of(get_job),
            parsed,
            "prepared statements {prepared}: 10 reads of a job, get_job.sql parsed {parsed} times"
        );
    }
}

#[tokio::test]
async fn a_statement_prepared_before_a_migration_is_prepared_again_after_it() {
    let db = TestDb::new().await;
    let org = Uuid::new_v4();
    let (store, parses) = counted_store(&db, true).await;
    store
        .add_suppression(org, "a@example.com", Some("asked us"))
        .await
        .unwrap();
    let before = store.list_suppressions(org, None, 10).await.unwrap();
    // a migration that changes the type of a column the statement answers: PostgreSQL
    // refuses to run the statement prepared before it ("cached plan must not change result
    // type"), and the store prepares it again
    db.client()
        .await
        .batch_execute("ALTER TABLE suppressions ALTER COLUMN detail TYPE varchar(1000)")
        .await
        .unwrap();
    let after = store.list_suppressions(org, None, 10).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].detail, before[0].detail);
    assert_eq!(
        parses.of(notify_postgres::sql::LIST_SUPPRESSIONS.sql),
        2,
        "prepared once before the migration, once after it"
    );
}
