function log(target: any) {}
@log
class A {}
