//! TLS both ways, with certificates made in the test (rcgen): a HIT over TLS with HTTP/2 chosen
//! by ALPN, the certificate chosen by SNI, an `https://` origin verified against a CA file, a
//! bad origin certificate (502, counted, never a downgrade), and bad certificate files at start.

mod support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, ServerName};
use secondhit::config::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::origin;
use support::proxy::{admin, start};

/// A test CA and the files of certificates it signs, in a temporary directory.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("secondhit-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Writes `<name>.pem` and `<name>.key` for `hosts`, signed by the CA (or self-signed),
    /// valid now unless `expired`; returns the paths and the certificate's DER.
    fn issue(
        &self,
        name: &str,
        hosts: &[&str],
        by_ca: bool,
        expired: bool,
    ) -> (PathBuf, PathBuf, Vec<u8>) {
        let mut params =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                .unwrap();
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = if by_ca {
            params.signed_by(&key, &self.ca).unwrap()
        } else {
            params.self_signed(&key).unwrap()
        };
        let (c, k) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k, cert.der().to_vec())
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS client trusting `ca`, offering h2 and http/1.1.
fn client_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in secondhit::tls::read_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// One GET over TLS to `addr` asking for `sni`; returns (ALPN, peer certificate DER, status,
/// x-cache, body).
async fn get_tls(
    addr: SocketAddr,
    ca: &Path,
    sni: &str,
    path: &str,
) -> (Vec<u8>, Vec<u8>, StatusCode, String, Bytes) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(client_config(ca));
    let tls = connector
        .connect(ServerName::try_from(sni.to_string()).unwrap(), tcp)
        .await
        .unwrap();
    let (_, conn) = tls.get_ref();
    let alpn = conn.alpn_protocol().unwrap_or_default().to_vec();
    let peer = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c: &CertificateDer<'_>| c.as_ref().to_vec())
        .unwrap_or_default();
    let req = Request::get(format!("https://{sni}{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = if alpn == b"h2" {
        let (mut send, c) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(c);
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, c) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(c);
        let mut req = req;
        req.headers_mut().insert("host", sni.parse().unwrap());
        send.send_request(req).await.unwrap()
    };
    let status = resp.status();
    let x_cache = resp
        .headers()
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (alpn, peer, status, x_cache, body)
}

#[tokio::test]
async fn a_hit_over_tls_with_http2_and_the_certificate_chosen_by_sni() {
    let pki = Pki::new("listen");
    let (cert, key, site_der) = pki.issue("site", &["site.test"], true, false);
    let (ocert, okey, other_der) = pki.issue("other", &["other.test"], true, false);
    let o = origin::start().await;
    let extra = format!(
        "[admission]\npolicy = \"admit-all\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\nplain_listen = \"127.0.0.1:0\"\n[[tls.sni]]\nhost = \"other.test\"\ncert = \"{}\"\nkey = \"{}\"",
        cert.display(),
        key.display(),
        ocert.display(),
        okey.display()
    );
    let (p, _) = start(&o.url(), &extra).await;
    let ca = pki.ca_file();
    let want = origin::content("/cache/t", 1000);
    for expected in ["MISS", "HIT"] {
        let (alpn, peer, status, x_cache, body) =
            get_tls(p.addr, &ca, "site.test", "/cache/t").await;
        assert_eq!(alpn, b"h2", "HTTP/2 chosen by ALPN");
        assert_eq!(peer, site_der, "the default certificate");
        assert_eq!((status, x_cache.as_str()), (StatusCode::OK, expected));
        assert_eq!(&body[..], &want[..]);
    }
    // SNI picks the other certificate; its requests are keyed under https://other.test.
    let (_, peer, status, x_cache, _) = get_tls(p.addr, &ca, "other.test", "/cache/t").await;
    assert_eq!(peer, other_der);
    assert_eq!((status, x_cache.as_str()), (StatusCode::OK, "MISS"));
    // The cleartext listener beside it keys under http://, apart from the https:// copy.
    let plain = p.plain_addr.unwrap();
    let r = support::proxy::raw(
        plain,
        b"GET /cache/t HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.contains("x-cache: MISS"), "{r}");
    assert_eq!(o.count("/cache/t"), 3);
    p.shutdown().await;
}

/// A TLS origin on 127.0.0.1 serving `cert`: answers every request with a cacheable 200.
async fn tls_origin(cert: &Path, key: &Path) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let pair = secondhit::tls::CertPair {
        host: None,
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
    };
    let certs = Arc::new(secondhit::tls::SniCertificates::load(&pair, &[]).unwrap());
    let acceptor = tokio_rustls::TlsAcceptor::from(secondhit::tls::server_config(certs).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(|_req: Request<hyper::body::Incoming>| async {
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("cache-control", "max-age=60")
                                .body(http_body_util::Full::new(Bytes::from_static(b"over tls")))
                                .unwrap(),
                        )
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn an_https_origin_is_verified_and_a_bad_certificate_is_a_counted_502() {
    let pki = Pki::new("origin");
    let (good_cert, good_key, _) = pki.issue("origin", &["localhost"], true, false);
    let (bad_cert, bad_key, _) = pki.issue("rogue", &["localhost"], false, false);
    let (good, good_task) = tls_origin(&good_cert, &good_key).await;
    let (bad, bad_task) = tls_origin(&bad_cert, &bad_key).await;
    let extra = format!(
        "[admission]\npolicy = \"admit-all\"\n[hosts]\n\"rogue.test\" = \"https://localhost:{}\"\n[tls]\norigin_ca_file = \"{}\"",
        bad.port(),
        pki.ca_file().display()
    );
    let (p, _) = start(&format!("https://localhost:{}", good.port()), &extra).await;
    let c = support::proxy::Http::new(p.addr);
    let g = c.get("/anything").await;
    assert_eq!(
        (g.status, g.x_cache(), g.bytes()),
        (StatusCode::OK, "MISS", &b"over tls"[..])
    );
    assert_eq!(c.get("/anything").await.x_cache(), "HIT");
    // The rogue origin's certificate is not signed by the CA: 502, never a plain-text retry.
    let g = c
        .send(http::Method::GET, "/anything", &[("host", "rogue.test")])
        .await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::BAD_GATEWAY, "ERROR"));
    assert!(g
        .header("cache-status")
        .unwrap()
        .contains("detail=origin-tls"));
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        m.contains("secondhit_origin_errors_total{kind=\"tls\"} 1"),
        "{m}"
    );
    p.shutdown().await;
    good_task.abort();
    bad_task.abort();
}

#[tokio::test]
async fn bad_certificate_files_are_one_line_at_start_naming_the_file() {
    let pki = Pki::new("files");
    let (cert, key, _) = pki.issue("good", &["site.test"], true, false);
    let (_, other_key, _) = pki.issue("other", &["site.test"], true, false);
    let (old_cert, old_key, _) = pki.issue("old", &["site.test"], true, true);
    let missing = pki.dir.join("missing.pem");
    let cases = [
        (missing.clone(), key.clone(), "missing.pem"),
        (cert.clone(), other_key.clone(), "does not match"),
        (old_cert.clone(), old_key.clone(), "expired"),
        (key.clone(), key.clone(), "no PEM certificate"),
    ];
    for (c, k, want) in cases {
        let toml = format!(
            "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"http://127.0.0.1:1\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"",
            c.display(),
            k.display()
        );
        let config = Config::from_toml(&toml).unwrap().validate().unwrap();
        let clock = Arc::new(secondhit::clock::ManualClock::default());
        let e = match secondhit::server::start(config, clock).await {
            Ok(_) => panic!("started with {want}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want) && e.lines().count() == 1, "{want}: {e}");
    }
    // A key without a certificate (or the reverse) is refused before anything is read.
    let e = Config::from_toml(&format!(
        "origin = \"http://127.0.0.1:1\"\n[tls]\ncert = \"{}\"",
        cert.display()
    ))
    .unwrap()
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("cert and key go together"), "{e}");
}
