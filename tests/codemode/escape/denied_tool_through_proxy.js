// expect-status: completed
// expect-result: "called read_file instead"
const p = new Proxy(codemode, { get: (t, k) => t[k] ?? t.read_file });
try { await p.delete_file({ path: "hello.txt" }); "called read_file instead" } catch (e) { e.name }
