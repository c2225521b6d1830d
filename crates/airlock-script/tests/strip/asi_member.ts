const k: string = "key";
class C {
  x = k
  public [k] = 1
}
