const x: number = 1;
export default x;
