export function TaskList({ tasks }) {
  if (tasks.length === 0) {
    return <p className="empty">No tasks yet</p>;
  }
  return (
    <ul>
      {tasks.map((t) => <li key={t.id}>{t.title}</li>)}
    </ul>
  );
}
