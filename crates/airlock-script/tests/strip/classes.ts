abstract class Base<T> implements Iterable<T>, Other {
  private readonly items: T[] = [];
  protected static count: number = 0;
  public declare tag: string;
  abstract size(): number;
  [key: string]: unknown;
  label?: string;
  sure!: number;
  override get first(): T | undefined { return this.items[0] }
  method(a: string): void;
  method(a: any): void {}
  readonly: boolean = true;
}
class Box extends Base<number> {
  size() { return 0 }
}
new Box().readonly
