let count: number = 1;
const names: string[] = ["a"];
function add(a: number, b?: number): number {
  return a + (b ?? 0);
}
const f = (x: string): string => x.trim();
try { add(1) } catch (e: unknown) { count = 2 }
let late!: number;
late = add(count, 3);
late
