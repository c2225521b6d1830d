// expect-status: completed
// expect-result: {"first": "hello", "lines": 2, "kind": "box", "size": 3}
interface Read { content: string }
type Shape = { kind: string; size: number };
abstract class Base<T> implements Iterable<T> {
  protected readonly items: T[] = [];
  abstract describe(): Shape;
  *[Symbol.iterator](): Iterator<T> { yield* this.items }
}
class Box extends Base<number> {
  private count?: number;
  describe(): Shape { return { kind: "box", size: 3 } satisfies Shape }
}
const read = (await codemode.read_file({ path: "hello.txt" })) as Read;
const lines: string[] = read.content.trim().split("\n");
const first = <string>lines[0];
const shape = new Box().describe()!;
return { first, lines: lines.length, ...shape };
