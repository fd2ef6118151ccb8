import { createRoot } from 'react-dom/client';
import { List } from './List.jsx';

// TODO: hook up the API
createRoot(document.getElementById('todo-list')).render(<List items={[]} />);
