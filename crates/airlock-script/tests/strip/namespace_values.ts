namespace Util {
  export const x = 1;
}
