export class Counter {
  #count = 0;
  next() { return ++this.#count; }
}
