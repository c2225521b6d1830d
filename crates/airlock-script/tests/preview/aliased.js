const tools = codemode;
const { delete_file } = codemode;
const name = "write" + "_file";
await codemode[name]({ path: "a" });
await codemode.read_file(...[{ path: "b" }]);
globalThis.codemode.exec({ command: "rm -rf /" });
this.x;
run(codemode);
codemode.read_file.call(null, { path: "c" });
