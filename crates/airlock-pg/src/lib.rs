//! airlock-pg: the PostgreSQL driver under airlock's shared store
//! (`store.url: postgres://…`, DESIGN §7.2). The store is synchronous and
//! knows every statement; this crate only carries them: a pool of
//! [tokio-postgres] connections ([deadpool-postgres]) on a small runtime of
//! its own, answering each synchronous call over a channel (so a call works
//! from any thread, inside an async runtime or not), and one more
//! connection that `LISTEN`s for the other instances' changes.
//!
//! Why these crates: tokio-postgres is the maintained native client of the
//! rust-postgres project (binary protocol, prepared statements,
//! notifications, no macros or build-time database); deadpool-postgres is
//! the pool made for it (statement cache per connection, recycling that
//! drops closed connections).
//!
//! [tokio-postgres]: https://docs.rs/tokio-postgres
//! [deadpool-postgres]: https://docs.rs/deadpool-postgres

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use airlock_store::{PG_SCHEMA, PgDriver, SqlConn, SqlRow, SqlValue, StoreError};
use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{AsyncMessage, Socket};

/// How long a connection attempt or a wait for a pooled connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of connections to one database, and the runtime they run on.
pub struct Postgres {
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    config: tokio_postgres::Config,
    tls: Tls,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres").finish_non_exhaustive()
    }
}

/// The URL without its password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// TLS to the database through airlock's one outbound client
/// (airlock-net): the server's certificate is always checked, against the
/// platform's roots and `tls.ca_file`, for the host name of the URL.
#[derive(Debug, Clone)]
pub struct Tls {
    ca_file: Option<PathBuf>,
}

/// A TLS handshake on one connection.
#[derive(Debug)]
pub struct TlsTo {
    host: String,
    ca_file: Option<PathBuf>,
}

/// A connection to the database over TLS.
#[derive(Debug)]
pub struct PgTlsStream(airlock_net::TlsClientStream<Socket>);

impl MakeTlsConnect<Socket> for Tls {
    type Stream = PgTlsStream;
    type TlsConnect = TlsTo;
    type Error = std::io::Error;

    fn make_tls_connect(&mut self, host: &str) -> Result<TlsTo, std::io::Error> {
        Ok(TlsTo {
            host: host.to_owned(),
            ca_file: self.ca_file.clone(),
        })
    }
}

impl TlsConnect<Socket> for TlsTo {
    type Stream = PgTlsStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<PgTlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            airlock_net::tls_over(stream, &self.host, self.ca_file.as_deref())
                .await
                .map(PgTlsStream)
        })
    }
}

impl TlsStream for PgTlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for PgTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PgTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// libpq's `sslmode` values that check the server, which tokio-postgres
/// does not name: here every TLS connection checks it, so they are
/// `require`.
fn with_sslmode_tokio_knows(url: &str) -> String {
    url.replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require")
}

impl Postgres {
    /// A pool of at most `pool_size` connections to the database at `url`
    /// (`postgres://user[:password]@host[:port]/database[?…]`). Nothing is
    /// connected yet: the first statement connects, and a database that
    /// cannot be reached is [`StoreError::Unavailable`] then. `sslmode`:
    /// `disable` (plain), `prefer` (the default: TLS when the server offers
    /// it), `require` (TLS or nothing); a TLS server's certificate is
    /// always checked, against the platform's roots and `ca_file`.
    pub fn connect(
        url: &str,
        pool_size: usize,
        ca_file: Option<&Path>,
    ) -> Result<Arc<Postgres>, StoreError> {
        let url = with_sslmode_tokio_knows(url);
        let url = url.as_str();
        let mut config = tokio_postgres::Config::from_str(url).map_err(|error| {
            StoreError::Unavailable(format!(
                "{} is not a PostgreSQL URL: {error}",
                redacted(url)
            ))
        })?;
        if config.get_application_name().is_none() {
            config.application_name("airlock");
        }
        // airlock's tables live in a schema of their own.
        let options = match config.get_options() {
            Some(options) => format!("{options} -c search_path={PG_SCHEMA}"),
            None => format!("-c search_path={PG_SCHEMA}"),
        };
        config.options(&options);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("airlock-pg")
            .enable_all()
            .build()
            .map_err(|error| StoreError::Unavailable(format!("cannot start a runtime: {error}")))?;
        let tls = Tls {
            ca_file: ca_file.map(Path::to_path_buf),
        };
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(pool_size.max(2))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(CONNECT_TIMEOUT))
                .create_timeout(Some(CONNECT_TIMEOUT))
                .recycle_timeout(Some(CONNECT_TIMEOUT))
                .build()
                .map_err(|error| StoreError::Unavailable(format!("cannot build a pool: {error}")))?
        };
        Ok(Arc::new(Postgres {
            runtime: Some(runtime),
            pool,
            config,
            tls,
        }))
    }

    fn handle(&self) -> Result<&tokio::runtime::Runtime, StoreError> {
        self.runtime
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("the driver is shut down".into()))
    }

    /// Runs `future` on the driver's runtime and waits for it on this thread.
    fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.handle()?.spawn(async move {
            let _ = sender.send(future.await);
        });
        receiver
            .recv()
            .map_err(|_| StoreError::Unavailable("the driver stopped mid-call".into()))
    }

    /// A pooled connection.
    fn checkout(&self) -> Result<Object, StoreError> {
        let pool = self.pool.clone();
        self.run(async move { pool.get().await })?
            .map_err(|error| StoreError::Unavailable(with_causes(&error)))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Dropping a runtime blocks; this may run inside another runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A store value bound to a placeholder, converted to the type PostgreSQL
/// gave the placeholder.
#[derive(Debug)]
struct Param(SqlValue);

impl ToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            SqlValue::Null => Ok(IsNull::Yes),
            SqlValue::Int(int) => match *ty {
                Type::INT8 => int.to_sql(ty, out),
                Type::INT4 => i32::try_from(*int)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*int)?.to_sql(ty, out),
                Type::BOOL => (*int != 0).to_sql(ty, out),
                _ => Err(format!("an integer cannot be bound as {ty}").into()),
            },
            SqlValue::Text(text) => text.as_str().to_sql(ty, out),
            SqlValue::Blob(bytes) => bytes.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn failed(error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => StoreError::Postgres {
            message: db.message().to_owned(),
            code: Some(db.code().code().to_owned()),
        },
        None => StoreError::Unavailable(with_causes(&error)),
    }
}

/// An error and what caused it, down to the root ("error performing TLS
/// handshake: invalid peer certificate: UnknownIssuer").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// One column of a result row as a store value.
fn value_of(row: &tokio_postgres::Row, index: usize, ty: &Type) -> Result<SqlValue, StoreError> {
    let got = match *ty {
        Type::INT8 => row
            .try_get::<_, Option<i64>>(index)
            .map(|v| v.map(SqlValue::Int)),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(index)
            .map(|v| v.map(|v| SqlValue::Int(i64::from(v)))),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(index)
            .map(|v| v.map(|v| SqlValue::Int(i64::from(v)))),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(index)
            .map(|v| v.map(|v| SqlValue::Int(i64::from(v)))),
        Type::BYTEA => row
            .try_get::<_, Option<Vec<u8>>>(index)
            .map(|v| v.map(SqlValue::Blob)),
        Type::VOID => Ok(None),
        _ => row
            .try_get::<_, Option<String>>(index)
            .map(|v| v.map(SqlValue::Text)),
    };
    got.map(|value| value.unwrap_or(SqlValue::Null))
        .map_err(|error| StoreError::Corrupt(format!("column {index}: {error}")))
}

/// A checked-out connection running the store's statements.
struct Session<'d> {
    driver: &'d Postgres,
    /// `None` once a statement lost the connection.
    client: Option<Object>,
}

impl Session<'_> {
    /// Runs `call` with the connection on the runtime, and takes it back.
    fn on<T: Send + 'static, F>(&mut self, call: impl FnOnce(Object) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = (Object, Result<T, tokio_postgres::Error>)> + Send + 'static,
    {
        let client = self
            .client
            .take()
            .ok_or_else(|| StoreError::Unavailable("the connection was lost".into()))?;
        let (client, result) = self.driver.run(call(client))?;
        match result {
            Ok(value) => {
                self.client = Some(client);
                Ok(value)
            }
            Err(error) => {
                // A statement error leaves the connection usable; a lost
                // connection is never handed out again.
                if error.as_db_error().is_some() && !client.is_closed() {
                    self.client = Some(client);
                } else {
                    drop(Object::take(client));
                }
                Err(failed(error))
            }
        }
    }
}

fn params(args: &[SqlValue]) -> Vec<Param> {
    args.iter().cloned().map(Param).collect()
}

/// The driver's view of the bound values.
fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl SqlConn for Session<'_> {
    fn query(&mut self, sql: &str, args: &[SqlValue]) -> Result<Vec<SqlRow>, StoreError> {
        let sql = sql.to_owned();
        let params = params(args);
        let rows = self.on(|client| async move {
            let result = async {
                let statement = client.prepare_cached(&sql).await?;
                client.query(&statement, &refs(&params)).await
            }
            .await;
            (client, result)
        })?;
        let Some(first) = rows.first() else {
            return Ok(Vec::new());
        };
        let columns: Arc<[String]> = first
            .columns()
            .iter()
            .map(|column| column.name().to_owned())
            .collect();
        let types: Vec<Type> = first.columns().iter().map(|c| c.type_().clone()).collect();
        rows.iter()
            .map(|row| {
                let values = types
                    .iter()
                    .enumerate()
                    .map(|(index, ty)| value_of(row, index, ty))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(SqlRow::new(Arc::clone(&columns), values))
            })
            .collect()
    }

    fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64, StoreError> {
        let sql = sql.to_owned();
        let params = params(args);
        self.on(|client| async move {
            let result = async {
                let statement = client.prepare_cached(&sql).await?;
                client.execute(&statement, &refs(&params)).await
            }
            .await;
            (client, result)
        })
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        let sql = sql.to_owned();
        self.on(|client| async move {
            let result = client.batch_execute(&sql).await;
            (client, result)
        })
    }
}

impl PgDriver for Postgres {
    fn transaction(
        &self,
        work: &mut dyn FnMut(&mut dyn SqlConn) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut session = Session {
            driver: self,
            client: Some(self.checkout()?),
        };
        session.batch("BEGIN")?;
        match work(&mut session) {
            Ok(()) => match session.batch("COMMIT") {
                Ok(()) => Ok(()),
                // A COMMIT whose answer never came may have landed.
                Err(StoreError::Unavailable(reason)) => Err(StoreError::Unavailable(format!(
                    "the connection was lost at commit (it may have landed): {reason}"
                ))),
                Err(error) => Err(error),
            },
            Err(error) => {
                if session.batch("ROLLBACK").is_err()
                    && let Some(client) = session.client.take()
                {
                    drop(Object::take(client));
                }
                Err(error)
            }
        }
    }

    fn autocommit(
        &self,
        work: &mut dyn FnMut(&mut dyn SqlConn) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut session = Session {
            driver: self,
            client: Some(self.checkout()?),
        };
        work(&mut session)
    }

    fn listen(&self, listen: &str, wake: Box<dyn Fn() + Send + Sync>) -> Result<(), StoreError> {
        let config = self.config.clone();
        let tls = self.tls.clone();
        let listen = listen.to_owned();
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::from(wake);
        // The first connection is made here, so a wrong URL or a database
        // that is away is an error at start, not a silent retry loop.
        let first = self.run({
            let (config, tls) = (config.clone(), tls.clone());
            let listen = listen.clone();
            let wake = Arc::clone(&wake);
            async move { listen_once(&config, tls, &listen, wake).await }
        })?;
        let finished = first?;
        self.handle()?.spawn(async move {
            let mut finished = finished;
            let mut backoff = Duration::from_millis(50);
            loop {
                // Runs until the connection is lost.
                let _ = (&mut finished).await;
                loop {
                    tokio::time::sleep(backoff).await;
                    match listen_once(&config, tls.clone(), &listen, Arc::clone(&wake)).await {
                        Ok(next) => {
                            finished = next;
                            backoff = Duration::from_millis(50);
                            // Whatever changed while no one listened.
                            wake();
                            break;
                        }
                        Err(_) => backoff = (backoff * 2).min(Duration::from_secs(1)),
                    }
                }
            }
        });
        Ok(())
    }
}

/// Connects, runs `listen`, and drives the connection on a task that calls
/// `wake` on each notification; the returned handle ends when the
/// connection is lost.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: Tls,
    listen: &str,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> Result<tokio::task::JoinHandle<()>, StoreError> {
    let (client, mut connection) = config.connect(tls).await.map_err(failed)?;
    let driver = tokio::spawn(async move {
        // The client lives as long as the connection is driven.
        let _client_alive = futures_util::future::poll_fn(|cx| {
            loop {
                match connection.poll_message(cx) {
                    std::task::Poll::Ready(Some(Ok(AsyncMessage::Notification(_)))) => wake(),
                    std::task::Poll::Ready(Some(Ok(_))) => {}
                    std::task::Poll::Ready(Some(Err(_)) | None) => {
                        return std::task::Poll::Ready(());
                    }
                    std::task::Poll::Pending => return std::task::Poll::Pending,
                }
            }
        })
        .await;
    });
    client.batch_execute(listen).await.map_err(failed)?;
    // Keep the client with the connection's task: dropping it closes the
    // connection.
    Ok(tokio::spawn(async move {
        let _ = driver.await;
        drop(client);
    }))
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redacted("postgres://airlock:s3cret@db:5432/airlock"),
            "postgres://airlock:***@db:5432/airlock"
        );
        assert_eq!(
            redacted("postgres://airlock@db/airlock"),
            "postgres://airlock@db/airlock"
        );
        assert_eq!(redacted("not a url"), "not a url");
    }
}
