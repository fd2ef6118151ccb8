package security_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/security"
)

func TestDestructiveEscalates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		command, pattern string
	}{
		{"rm -rf build", "rm -r/-f"},
		{"rm -fr /", "rm -r/-f"},
		{"rm -r dist", "rm -r/-f"},
		{"rm -f app.db", "rm -r/-f"},
		{"rm -R node_modules", "rm -r/-f"},
		{"rm --recursive out", "rm -r/-f"},
		{"rm -v -rf build", "rm -r/-f"},
		{"rm build -rf", "rm -r/-f"},
		{"/bin/rm -rf /srv", "rm -r/-f"},
		{"cd /tmp && rm -rf *", "rm -r/-f"},
		{"find . -name '*.o' | xargs rm -f", "rm -r/-f"},
		{"echo $(rm -rf ~)", "rm -r/-f"},
		{"chmod 777 /etc/passwd", "chmod"},
		{"chmod -R u+x scripts", "chmod"},
		{"chown root:root app", "chown"},
		{"sudo apt-get install nginx", "sudo/su"},
		{"su - postgres", "sudo/su"},
		{"/usr/bin/sudo reboot", "sudo/su"},
		{"docker rm -f web", "docker rm/stop/restart/kill"},
		{"docker stop web", "docker rm/stop/restart/kill"},
		{"docker restart db", "docker rm/stop/restart/kill"},
		{"docker rmi alpine", "docker rm/stop/restart/kill"},
		{"docker kill web", "docker rm/stop/restart/kill"},
		{"docker container rm web", "docker rm/stop/restart/kill"},
		{"docker system prune -af", "docker rm/stop/restart/kill"},
		{"mkfs.ext4 /dev/sdb1", "mkfs"},
		{"mkfs -t xfs /dev/sdc", "mkfs"},
		{"dd if=/dev/zero of=/dev/sda bs=1M", "dd if="},
		{"shred -u secrets.txt", "shred/wipefs"},
		{"sed -i 's/DEBUG=0/DEBUG=1/' .env", "in-place edit of a config file"},
		{"sed -i.bak 's/a/b/' config/app.yaml", "in-place edit of a config file"},
		{"sed -e 's/a/b/' -i /etc/hosts", "in-place edit of a config file"},
		{"echo '{}' > appsettings.json", "truncating redirect into a config file"},
		{"echo x >appsettings.Production.json", "truncating redirect into a config file"},
		{"cat new.yml > docker-compose.yml", "truncating redirect into a config file"},
		{"echo 'nameserver 1.1.1.1' > /etc/resolv.conf", "truncating redirect into a config file"},
		{"echo KEY=1 | tee .env", "in-place edit of a config file"},
		{"git push --force origin main", "git push --force / reset --hard / clean -f"},
		{"git push -f", "git push --force / reset --hard / clean -f"},
		{"git push origin main --force-with-lease", "git push --force / reset --hard / clean -f"},
		{"git -C repo push --force", "git push --force / reset --hard / clean -f"},
		{"git reset --hard HEAD~3", "git push --force / reset --hard / clean -f"},
		{"git clean -fdx", "git push --force / reset --hard / clean -f"},
		{"kill -9 1234", "kill -9 / killall / pkill"},
		{"pkill -f server", "kill -9 / killall / pkill"},
		{"shutdown -h now", "shutdown/reboot"},
		{"dotnet publish -c Release", "dotnet publish"},
		{":(){ :|:& };:", "fork bomb"},
		{"find /var/www -type f -delete", "find -delete"},
		{"git push origin +main", "git push --force / reset --hard / clean -f"},
		{"docker compose down -v", "docker rm/stop/restart/kill"},
		{"docker volume rm data", "docker rm/stop/restart/kill"},
		{"rm -rf", "rm -r/-f"},
	}
	for _, tc := range cases {
		t.Run(tc.command, func(t *testing.T) {
			t.Parallel()
			ok, pattern := security.Destructive(tc.command)
			require.True(t, ok, "must escalate: %s", tc.command)
			require.Equal(t, tc.pattern, pattern)
		})
	}
}

func TestDestructiveLetsOrdinaryCommandsThrough(t *testing.T) {
	t.Parallel()
	for _, command := range []string{
		"ls -la",
		"cat README.md",
		"grep rm main.go",
		"grep -rn 'rm -rf' docs",
		`echo "chmod"`,
		"rmdir empty",
		"npm test",
		"go test ./...",
		"git push",
		"git push origin feature-fix",
		"git status",
		"docker ps",
		"docker logs web",
		"docker build -t app .",
		"cat .env.example",
		"cp config.yaml /tmp/config.yaml.bak",
		"python3 -m pytest -q",
		"sed 's/a/b/' config.yaml",
		"ls > files.txt",
		"go build ./... 2>&1",
		"make dd",
		"echo sudoku",
		"kill 1234",
		"dotnet build",
		"terraform plan",
		"cat logs/reboot.log",
		"docker image ls",
		"git push -u origin main",
		"git push --follow-tags",
		"sed -n '/listen/p' nginx.conf",
		"git -C repo status",
	} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			ok, pattern := security.Destructive(command)
			require.False(t, ok, "must not escalate: %s (matched %s)", command, pattern)
		})
	}
}
