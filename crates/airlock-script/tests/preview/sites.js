const text = await codemode.read_file({ path: "README.md" });
await codemode["write_file"]({ path: `notes/a.txt`, content: text, mode: 0o644 });
await codemode[`delete_file`]({ path: "old.txt", recursive: false, depth: -1, tags: ["x", 2.5, null] });
for (const name of ["a", "b"]) {
  await codemode.edit_file({ path: name, old: "x", new: "y" });
}
if (text.length > 10) await codemode.exec({ command: "cargo test" });
const all = await Promise.all([1, 2].map((n) => codemode.stat({ path: String(n) })));
return codemode.grep({ pattern: "TODO" }) ?? codemode.glob({ pattern: "*" });
