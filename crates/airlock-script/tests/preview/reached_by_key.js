const tools = globalThis;
tools["codemode"].delete_file({ path: "a" });
await codemode.write_file({ __proto__: { path: "shown" }, content: "x" });
await codemode.read_file({ path: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] });
