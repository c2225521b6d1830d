//! Local syslog receivers (RFC 5424) that a test reads messages from: TCP
//! with octet-counted frames (RFC 6587 §3.4.1; behind `TestCa::proxy` it is
//! RFC 5425's TLS), and UDP, one message per datagram. Each is a real
//! socket on 127.0.0.1; a receiver keeps accepting connections (a client
//! that reconnects is heard again) until the test process ends.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc::{Receiver, channel};

/// One message as received, and which connection brought it (0 for UDP).
#[derive(Debug, Clone)]
pub struct Message {
    pub connection: usize,
    pub text: String,
}

/// A TCP receiver of octet-counted messages.
pub fn tcp_receiver() -> (SocketAddr, Receiver<Message>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        for (connection, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let sender = sender.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    // MSG-LEN SP SYSLOG-MSG
                    let mut length = Vec::new();
                    if reader.read_until(b' ', &mut length).unwrap_or(0) == 0 {
                        return;
                    }
                    length.pop();
                    let Some(length) = std::str::from_utf8(&length)
                        .ok()
                        .and_then(|text| text.parse::<usize>().ok())
                    else {
                        let _ = sender.send(Message {
                            connection,
                            text: format!("BAD FRAME {length:?}"),
                        });
                        return;
                    };
                    let mut message = vec![0; length];
                    if reader.read_exact(&mut message).is_err() {
                        return;
                    }
                    let _ = sender.send(Message {
                        connection,
                        text: String::from_utf8_lossy(&message).into_owned(),
                    });
                }
            });
        }
    });
    (addr, receiver)
}

/// A UDP receiver: each datagram one message.
pub fn udp_receiver() -> (SocketAddr, Receiver<Message>) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("address");
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 65_536];
        while let Ok(read) = socket.recv(&mut buffer) {
            let _ = sender.send(Message {
                connection: 0,
                text: String::from_utf8_lossy(&buffer[..read]).into_owned(),
            });
        }
    });
    (addr, receiver)
}
