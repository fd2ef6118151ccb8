// Renders the task list; the empty state lives in index.html.
const list = document.getElementById('tasks');
const empty = document.querySelector('.empty-state');
export function render(tasks) {
  list.replaceChildren(...tasks.map((t) => {
    const li = document.createElement('li');
    li.textContent = t.title;
    return li;
  }));
  empty.hidden = tasks.length > 0;
}
