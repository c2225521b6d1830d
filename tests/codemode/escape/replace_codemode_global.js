// expect-status: completed
// expect-result: "string"
try { globalThis.codemode = { read_file: async () => "forged" } } catch (e) {}
try { delete globalThis.codemode } catch (e) {}
typeof (await codemode.read_file({ path: "hello.txt" })).content
