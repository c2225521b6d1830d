//! What a long call says while it runs (a script's console lines, each of
//! its calls as it starts and ends), for a face that can pass it on (MCP
//! progress notifications). The face sets a sink around `submit` on the
//! thread that submits; what runs the call says things on that thread.

use std::cell::RefCell;

/// Where a call's words go.
pub type Sink = Box<dyn Fn(&str)>;

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// Runs `f` with `sink` hearing what is said on this thread meanwhile.
pub fn with_sink<R>(sink: Sink, f: impl FnOnce() -> R) -> R {
    let before = SINK.with(|slot| slot.replace(Some(sink)));
    let result = f();
    SINK.with(|slot| {
        slot.replace(before);
    });
    result
}

/// Whether a sink is set on this thread (so that what would be said need
/// not be made when nobody hears it).
pub fn listening() -> bool {
    SINK.with(|slot| slot.borrow().is_some())
}

/// Says `message` to the sink set on this thread, if any.
pub fn say(message: &str) {
    SINK.with(|slot| {
        if let Some(sink) = slot.borrow().as_ref() {
            sink(message);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::{say, with_sink};

    #[test]
    fn words_reach_the_sink_of_their_thread_only_while_it_is_set() {
        let heard = Rc::new(RefCell::new(Vec::new()));
        let into = heard.clone();
        say("before");
        with_sink(
            Box::new(move |text| into.borrow_mut().push(text.to_owned())),
            || {
                say("one");
                std::thread::spawn(|| say("elsewhere")).join().ok();
                say("two");
            },
        );
        say("after");
        assert_eq!(*heard.borrow(), ["one", "two"]);
    }
}
