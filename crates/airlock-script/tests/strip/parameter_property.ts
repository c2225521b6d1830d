class Point {
  constructor(private x: number, public y: number) {}
}
