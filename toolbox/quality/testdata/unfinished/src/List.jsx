export function List({ items }) {
  return (
    <>
      {items.map((i) => <li key={i.id}>{i.text}</li>)}
    </>
  );
}
