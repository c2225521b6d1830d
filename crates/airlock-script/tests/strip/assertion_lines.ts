function f() {
  return <
    number
  >1;
}
