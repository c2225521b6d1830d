interface Args { path: string }
const args: Args = { path: "a.txt" };
const read = await (codemode as any).read_file(args);
await codemode.write_file!({ path: "b.txt", content: read as string });
