//! The replication proxies of the drill's Patroni cluster: a small TCP proxy in front of each
//! node that reads each connection's startup packet and refuses, or closes, the streams of a
//! standby that is cut off ([`super::PatroniCluster::cut`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which standbys are cut off, shared by every replication proxy.
#[derive(Default)]
pub(super) struct Cuts {
    pub(super) names: Mutex<HashSet<String>>,
    pub(super) changed: tokio::sync::Notify,
}

impl Cuts {
    pub(super) fn is_cut(&self, name: Option<&str>) -> bool {
        name.is_some_and(|n| self.names.lock().expect("cuts lock").contains(n))
    }
}

/// Forward every connection to `upstream`, unless its startup packet names a cut standby.
pub(super) async fn serve_link(listener: TcpListener, upstream: u16, cuts: Arc<Cuts>) {
    // Dropped (aborting every link) when this task is aborted.
    let mut links = tokio::task::JoinSet::new();
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        links.spawn(link(sock, upstream, cuts.clone()));
        while links.try_join_next().is_some() {}
    }
}

async fn link(mut client: TcpStream, upstream: u16, cuts: Arc<Cuts>) -> std::io::Result<()> {
    let startup = read_startup(&mut client).await?;
    let name = startup_param(&startup, "application_name");
    if cuts.is_cut(name.as_deref()) {
        return Ok(());
    }
    let mut server = TcpStream::connect(("127.0.0.1", upstream)).await?;
    server.write_all(&startup).await?;
    let cut = async {
        loop {
            let changed = cuts.changed.notified();
            if cuts.is_cut(name.as_deref()) {
                return;
            }
            changed.await;
        }
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        () = cut => {}
    }
    Ok(())
}

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const PROTOCOL_3: u32 = 196_608;

/// The client's startup packet, after declining SSL and GSS encryption (answering `N`, as a
/// server without them does), so the proxy can read it.
async fn read_startup(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    for _ in 0..3 {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await?;
        let n = u32::from_be_bytes(len) as usize;
        if !(8..=10_000).contains(&n) {
            return Err(std::io::Error::other("not a PostgreSQL startup packet"));
        }
        let mut body = vec![0u8; n - 4];
        s.read_exact(&mut body).await?;
        let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        if n == 8 && (code == SSL_REQUEST || code == GSSENC_REQUEST) {
            s.write_all(b"N").await?;
            continue;
        }
        let mut packet = len.to_vec();
        packet.extend_from_slice(&body);
        return Ok(packet);
    }
    Err(std::io::Error::other("too many encryption requests"))
}

/// A parameter of a protocol 3.0 startup packet (length, version, then `key\0value\0`... `\0`).
fn startup_param(packet: &[u8], key: &str) -> Option<String> {
    if packet.len() < 8
        || u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]) != PROTOCOL_3
    {
        return None;
    }
    let mut parts = packet[8..].split(|b| *b == 0);
    while let Some(k) = parts.next() {
        if k.is_empty() {
            return None;
        }
        let v = parts.next()?;
        if k == key.as_bytes() {
            return Some(String::from_utf8_lossy(v).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup(params: &[(&str, &str)]) -> Vec<u8> {
        let mut body = PROTOCOL_3.to_be_bytes().to_vec();
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut p = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        p.extend(body);
        p
    }

    #[test]
    fn the_startup_packet_names_the_standby() {
        let p = startup(&[
            ("user", "replicator"),
            ("application_name", "pg1"),
            ("replication", "true"),
        ]);
        assert_eq!(
            startup_param(&p, "application_name").as_deref(),
            Some("pg1")
        );
        assert_eq!(startup_param(&p, "user").as_deref(), Some("replicator"));
        assert_eq!(startup_param(&p, "database"), None);
        let mut cancel = 16u32.to_be_bytes().to_vec();
        cancel.extend(80_877_102u32.to_be_bytes());
        cancel.extend([0u8; 8]);
        assert_eq!(startup_param(&cancel, "application_name"), None);
    }
}
